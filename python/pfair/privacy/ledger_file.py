"""A ledger's file: atomic writes, rollback and conflict guards (the storage of
:class:`pfair.privacy.ledger.PrivacyLedger`, apart from its accounting state).

A ledger file counts its writes (``revision``, never backwards), and every write appends its
revision and the SHA-256 of what it wrote to an append-only journal beside it (``<file>.journal``,
and to an ``anchor`` journal elsewhere if given, e.g. outside a directory that is backed up). A
ledger file older than its journals' last entry (restored from a backup), replaced by another
file of the same revision, or gone while its journal is not (deleted) raises
:class:`~pfair.exceptions.LedgerRollback` when loaded or written: otherwise a restored file would
answer its rounds again and spend its budget again. A file written under an anchor says so
(``"anchored": true``), and an anchor with no record of it is refused too: the anchor was lost, or
the file was copied or restored where its anchor never saw it.  A ledger object replaces a
ledger file only if it is the revision the object last read or wrote there (by resolved path),
checked and replaced under an exclusive lock of ``<file>.lock``; otherwise it raises
:class:`~pfair.exceptions.LedgerConflict` and writes nothing.
Without this, two processes that load the ledger before either writes (two fits on one file, or
a deployed silo handling two messages at once) would both pass the replay and budget checks, and
the last write would erase the other's charge: many noisy answers to one round for one charge.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from pfair.exceptions import LedgerConflict, LedgerRollback

__all__ = ["FILE_LOCKS", "JOURNAL_SUFFIX", "check_journals", "file_lock", "journals", "read_ledger", "resolved",
           "write_ledger"]


def write_ledger(target: Path, content: Callable[[Optional[int]], tuple], *, seen: Optional[int],
                 anchor: Optional[os.PathLike | str], anchored: bool, who: str) -> None:
    """Replace the ledger file ``target`` (a :func:`resolved` path) atomically, under an exclusive
    lock, by ``content(found)`` — ``(revision, bytes)`` of the new file, given the revision
    ``found`` on disk (None: no file) — and journal the write.

    Refuses (:class:`LedgerConflict`, nothing written) a file on disk that is not the revision
    ``seen`` (the one the writer last read or wrote there; None: never), a file with several hard
    links, and (:class:`LedgerRollback`) a file its journals say is older, another one or deleted
    (:func:`check_journals`; ``anchored``: the writer's ledger was written under an anchor). ``who``
    names the ledger in the messages."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target):
        found, links = _revision_on_disk(target)
        check_journals(target, found, None, anchor, anchored=anchored and found is not None)
        if found is not None and found != seen:
            if seen is None:
                raise LedgerConflict(
                    f"{who}: there is a file {target.name!r} at that path that this ledger never read; "
                    "writing would replace it (and a ledger's charges with it). Load it (PrivacyLedger.load), or "
                    "remove the file first if you mean to replace it")
            raise LedgerConflict(
                f"{who}: the ledger file {target.name!r} changed since this ledger read it (revision "
                f"{found}, read {seen}): another process charged this silo meanwhile. Nothing was written and "
                "the refused release is not sent; load the ledger again")
        if links > 1:
            raise LedgerConflict(f"{who}: the ledger file {target.name!r} has {links} hard links; a write "
                                 "would split them into separate ledgers. Keep one name (a symbolic link is fine)")
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        try:
            revision, text = content(found)
            with os.fdopen(fd, "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            # After the file: a crash in between leaves a file newer than its journal, which
            # is accepted (and journalled at the next write); never a journal ahead of its file.
            for journal in journals(target, anchor):
                _journal_append(journal, target, revision, hashlib.sha256(text).hexdigest())
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def read_ledger(path: os.PathLike | str, anchor: Optional[os.PathLike | str] = None) -> dict:
    """The content of the ledger file at ``path``, checked against its journals: refuses
    (:class:`LedgerRollback`) a file older than its journals say, and (:class:`LedgerConflict`)
    a file that is no ledger (e.g. truncated)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw)
    except ValueError:
        raise LedgerConflict(f"the ledger file {Path(path).name!r} is not valid JSON (truncated or overwritten?); "
                             "restore the latest copy of it") from None
    if not isinstance(data, dict):
        raise LedgerConflict(f"the file {Path(path).name!r} is not a ledger")
    check_journals(resolved(path), int(data.get("revision", 0)), hashlib.sha256(raw).hexdigest(), anchor,
                   anchored=bool(data.get("anchored", False)))
    return data


JOURNAL_SUFFIX = ".journal"


def journals(target: Path, anchor: Optional[os.PathLike | str] = None) -> List[Path]:
    """The journals of the ledger file ``target``: ``<file>.journal`` and the ``anchor``, if any."""
    out = [target.with_name(target.name + JOURNAL_SUFFIX)]
    return out + ([resolved(anchor)] if anchor is not None else [])


#: Bytes of a journal's end read to find its last entry (entries are about 120 bytes).
JOURNAL_TAIL = 1 << 16


def _journal_last(journal: Path, target: Path) -> Optional[dict]:
    """The last complete entry of a journal about the ledger file ``target`` (None: no journal, or
    none about it). An anchor may be shared by several ledgers: each entry names its file."""
    try:
        with open(journal, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - JOURNAL_TAIL))
            entry = _last_about(f.read(), target)
            if entry is None and size > JOURNAL_TAIL:
                # An anchor shared by several ledgers: the others may have written past the tail
                # since this ledger's last entry, and "none about it" must not be read as "new".
                f.seek(0)
                entry = _last_about(f.read(), target)
    except FileNotFoundError:
        return None
    return entry


def _last_about(data: bytes, target: Path) -> Optional[dict]:
    """The last complete journal entry about ``target`` in ``data`` (None: none)."""
    for line in reversed(data.decode(errors="replace").splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash, or cut by the tail
        if isinstance(entry, dict) and "revision" in entry and entry.get("ledger", str(target)) == str(target):
            return entry
    return None


def _journal_append(journal: Path, target: Path, revision: int, sha256: str) -> None:
    """Append an entry; a line left unfinished by a crash is ended first, so that it cannot swallow
    this one."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    with open(journal, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        line = {"revision": int(revision), "sha256": sha256, "ledger": str(target)}
        f.write((json.dumps(line) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
    try:  # the new entry's directory entry too, where the platform allows it
        fd = os.open(journal.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def check_journals(target: Path, revision: Optional[int], sha256: Optional[str],
                   anchor: Optional[os.PathLike | str] = None, *, anchored: bool = False) -> None:
    """Refuse a ledger file (``revision`` and the SHA-256 of its bytes; ``revision=None``: no file)
    that its journals say is older than the last one written, another file, or deleted; and, with
    ``anchored`` (the file says it was written under an anchor), a file that the ``anchor`` has no
    record of: the anchor was lost, or the state directory was restored or copied somewhere its
    anchor never saw it, where an empty anchor would accept any copy."""
    for journal in journals(target, anchor):
        last = _journal_last(journal, target)
        is_anchor = journal.parent != target.parent or journal.name != target.name + JOURNAL_SUFFIX
        fix = ("Restore the latest ledger file; or, to start this silo's budget over on purpose (only if its data "
               "changed, or you accept spending its budget again), run `pfair node reset --state-dir DIR "
               "--i-understand`" + (f" --anchor {journal}" if is_anchor else ""))
        if last is None:
            if is_anchor and anchored and revision is not None:
                raise LedgerRollback(
                    f"the ledger file {target.name!r} (revision {revision}) was written under an anchor, but its "
                    f"anchor {str(journal)!r} has no record of it: the anchor was lost or moved, or this state "
                    "directory was restored or copied to a place its anchor never saw, and any copy of it would then "
                    "answer its rounds again. Put the anchor file back (node config ledger-anchor), or keep the state "
                    "directory at the path it was anchored at. " + fix)
            continue
        where = f"its anchor {str(journal)!r}" if is_anchor else f"its journal {journal.name!r}"
        if revision is None:
            raise LedgerRollback(f"the ledger file {target.name!r} is gone, but {where} records revision "
                                 f"{last['revision']}: it was deleted, and a new ledger would spend the budget again. "
                                 + fix)
        if revision < int(last["revision"]):
            raise LedgerRollback(f"the ledger file {target.name!r} is revision {revision}, but {where} records "
                                 f"revision {last['revision']}: it was restored from an older copy, which would answer "
                                 "rounds again and spend its budget again. " + fix)
        if revision == int(last["revision"]) and sha256 is not None and sha256 != last.get("sha256"):
            raise LedgerRollback(f"the ledger file {target.name!r} is revision {revision} but not the one {where} "
                                 "records (another file of the same revision). " + fix)


def resolved(path: os.PathLike | str) -> Path:
    """``path`` absolute, with symbolic links followed: one file, one ledger, whatever its name
    and the working directory."""
    return Path(os.path.realpath(os.fspath(path)))


def _revision_on_disk(path: Path) -> tuple:
    """``(revision, hard links)`` of the ledger file at ``path`` (revision 0 for a file written
    before ledgers counted their writes, -1 for a file that is no ledger); ``(None, 0)`` when
    there is no file."""
    try:
        with open(path) as f:
            links = os.fstat(f.fileno()).st_nlink
            try:
                data = json.load(f)
                return (int(data.get("revision", 0)) if isinstance(data, dict) else -1), links
            except (ValueError, TypeError):
                return -1, links
    except FileNotFoundError:
        return None, 0


try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Whether :func:`file_lock` locks anything (POSIX ``flock``; not on Windows).
FILE_LOCKS = fcntl is not None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock of ``<path>.lock`` for a ``with`` block (POSIX ``flock``,
    released when the block ends or the process dies). Where there is no ``flock`` (Windows,
    :data:`FILE_LOCKS` False) it locks nothing: a ledger's revision check then still refuses a
    stale write but is not atomic with it, and a deployed silo (:class:`pfair.flower.node.SiloNode`)
    refuses to run."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(Path(path).with_name(Path(path).name + ".lock"), os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
