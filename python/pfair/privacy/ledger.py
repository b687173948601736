"""Per-silo privacy ledger: a silo's (ε, δ) budget and the mechanisms charged against it.

Each silo is its own accountant (ISRL-DP). A :class:`PrivacyLedger` holds the budget and the list
of recorded :class:`MechanismEvent`. Its ε is the minimum of three valid upper bounds at the
budget's δ: the RDP composition of every event (addition, Balle et al. 2020 conversion); —
when every event is Gaussian given public information (full-batch releases such as the DP
histogram, shuffled epochs, public-batch rounds) — the exact account, ``δ(ε) = E[δ_Gauss(ε; μ)]``
over the law of ``μ² = Σ K_j/z_j²`` (``docs/accounting.md``, "One ledger currency"); and — when
some event hides its batch (record mode) — the PLD currency: the privacy-loss distribution of
every event (hidden batches by their dominating pair, the rest by the exact Gaussian mixture),
composed by FFT, ``δ(ε) = E[(1 − e^{ε−L})₊]`` under the composed loss L (``docs/accounting.md``,
"The PLD currency").

**PLD-priced runs are paid in full when planned.** A PLD total bounds the composition of a
sequence of mechanisms fixed in advance; it is not a valid stopping rule (unlike an RDP sum or a
Gaussian μ², which are privacy filters), so a ledger must never decide round by round, from a
PLD total, whether one more round fits. A run calibrated by the PLD
(``begin_run(..., prepaid=True)``) is therefore charged for all its planned rounds when it is
registered, before its first round is answered: a run that stops early has still paid for every
planned round, and its rounds only advance the replay guard.
:meth:`PrivacyLedger.charge` refuses — by raising
:class:`PrivacyBudgetExceeded` *before* recording — any event that would push ε past the budget,
so a silo that has spent its budget stops answering.

A ledger outlives a fit. It is bound to its silo's data by a fingerprint (a hash of the silo's
shape, labels, groups and a fixed sample of its feature rows), serialises to a plain dict or a
JSON file (:meth:`save`, :meth:`load`; with a ``path`` every charge is written through
atomically), and keeps

* ``runs``: each training run's mechanism and the next round it may answer, so a round is charged
  at most once (a second request for it raises :class:`ReplayRefused`; a silo that was down skips
  the rounds it missed) and a resumed run goes on where the ledger says it stopped, without
  charging again;
* ``releases``: values the silo already released (its DP histogram of s), which a later fit reuses
  for free (post-processing) instead of paying for them again.

Storage is apart from the state: :mod:`pfair.privacy.ledger_file` writes and reads a ledger's
file (atomic writes, a revision counter, journals and an optional anchor against rollback, an
exclusive lock against two writers), and :mod:`pfair.privacy.fingerprint` computes the data
fingerprint that binds a ledger to its silo's records. Their names are re-exported here.

Adjacency is replace-one (one record's sensitive attribute). Hence events with
``sampling="poisson"`` (the add/remove-one bound) are refused; use ``"poisson_replace_one"``
with the noise multiplier measured against the add/remove sensitivity.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from pfair import _core
from pfair.exceptions import LedgerMismatch, PrivacyBudgetExceeded, ReplayRefused
from pfair.privacy.accountant import _delta, _epsilon, validate_event_args
# The storage and the fingerprint, re-exported: their names were this module's.
from pfair.privacy.fingerprint import (  # noqa: F401
    FINGERPRINT_PREFIX,
    FINGERPRINT_ROWS,
    data_fingerprint,
    fingerprint_step,
    legacy_fingerprint,
)
from pfair.privacy.ledger_file import (  # noqa: F401
    FILE_LOCKS,
    JOURNAL_SUFFIX,
    check_journals,
    file_lock,
    journals,
    read_ledger,
    resolved,
    write_ledger,
)

__all__ = ["MechanismEvent", "PrivacyBudgetExceeded", "PrivacyLedger", "ReplayRefused", "charge_rounds_together",
           "data_fingerprint", "legacy_fingerprint"]

LEDGER_FORMAT = 3
#: Formats this pfair reads. Format 1 (before shuffled epochs) holds no ``epochs`` fields and no
#: shuffle runs; its events are accounted exactly as written (the exact currency can only lower ε).
#: Format 2 has no prepaid runs. Format 3 marks prepaid runs (``"prepaid": true``, charged in full
#: when registered); a pfair that reads format 2 only would charge their rounds a second time.
READABLE_FORMATS = (1, 2, 3)


@dataclass(frozen=True)
class MechanismEvent:
    """``steps`` Gaussian releases with noise multiplier ``noise_multiplier`` (noise std / L2
    sensitivity under replace-one adjacency; add/remove sensitivity for ``poisson_replace_one``)
    on batches drawn by ``sampling`` at rate ``sample_rate``."""

    name: str
    sampling: str
    sample_rate: float
    noise_multiplier: float
    steps: int
    #: ``sampling="shuffle"`` only: Gaussian releases per record (epochs newly touched by these
    #: rounds); ``None`` means the rounds start an epoch, ``⌈steps/b⌉`` with ``b = ⌈1/q⌉``.
    epochs: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str; got {self.name!r}")
        s, q, z, t = validate_event_args(
            sampling=self.sampling, sample_rate=self.sample_rate, noise_multiplier=self.noise_multiplier, steps=self.steps
        )
        if s == "poisson":
            raise ValueError(
                "sampling='poisson' is the add/remove-one bound and does not cover pfair's replace-one "
                "adjacency; record the event with sampling='poisson_replace_one' (noise multiplier "
                "against the add/remove sensitivity) instead"
            )
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "steps", t)
        if s != "shuffle":
            if self.epochs is not None:
                raise ValueError(f"epochs is for sampling='shuffle' only; got epochs={self.epochs!r} with {s!r}")
            return
        if self.epochs is None:
            object.__setattr__(self, "epochs", int(_core.shuffle_releases(q, t)))
        k = self.epochs
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"epochs must be an int; got {k!r}")
        # `steps` consecutive rounds touch at least ⌈steps/b⌉ epochs, at most one touched before.
        least = max(0, int(_core.shuffle_releases(q, t)) - 1)
        if not least <= k <= t:
            raise ValueError(f"epochs={k} is impossible for {t} shuffled rounds at sample_rate={q:g} "
                             f"(between {least} and {t}); the ledger record is corrupt")
        object.__setattr__(self, "epochs", int(k))

    @classmethod
    def gaussian_histogram(cls, *, noise_multiplier: float, name: str = "dp_histogram") -> "MechanismEvent":
        """One full-batch Gaussian release, e.g. a DP histogram of ``s`` (replace-one L2
        sensitivity of a count histogram is √2)."""
        return cls(name=name, sampling="full_batch", sample_rate=1.0, noise_multiplier=noise_multiplier, steps=1)

    def as_tuple(self) -> tuple:
        return (self.sampling, self.sample_rate, self.noise_multiplier, self.steps)

    @classmethod
    def _trusted(cls, name: str, sampling: str, sample_rate: float, noise_multiplier: float, steps: int,
                 epochs: Optional[int]) -> "MechanismEvent":
        """An event of a mechanism validated before (a registered run), without re-validation:
        a silo charges its run every epoch, and this keeps a charge one cheap Rust call."""
        e = object.__new__(cls)
        for k, v in (("name", name), ("sampling", sampling), ("sample_rate", sample_rate),
                     ("noise_multiplier", noise_multiplier), ("steps", steps), ("epochs", epochs)):
            object.__setattr__(e, k, v)
        return e

    def count(self) -> int:
        """What composes: Gaussian releases per record for shuffled epochs, else steps."""
        return int(self.epochs) if self.sampling == "shuffle" else self.steps


class PrivacyLedger:
    """A silo's (ε, δ) budget and its recorded mechanisms.

    Parameters
    ----------
    epsilon, delta : float
        The budget: the silo's whole transcript, over every fit, must be (epsilon, delta)-DP.
    silo : str or int, optional
        Name used in messages and reports.
    fingerprint : str, optional
        :func:`data_fingerprint` of the silo's data; set by :meth:`bind` on first use.
    path : str or Path, optional
        A JSON file the ledger is written to after every change (atomically).
    """

    def __init__(self, *, epsilon: float, delta: float, silo: Optional[object] = None,
                 fingerprint: Optional[str] = None, path: Optional[os.PathLike | str] = None,
                 anchor: Optional[os.PathLike | str] = None) -> None:
        self.epsilon = _epsilon(epsilon)
        self.delta = _delta(delta)
        self.silo = silo
        self.fingerprint = fingerprint
        self.path = resolved(path) if path is not None else None
        #: A second journal of this ledger's writes, kept elsewhere (see the module docstring).
        self.anchor = Path(anchor) if anchor is not None else None
        #: Whether this ledger was ever written under an anchor (kept in the file: once anchored,
        #: an anchor with no record of it is refused, see :func:`check_journals`).
        self.anchored = anchor is not None
        self.events: List[MechanismEvent] = []
        self.runs: Dict[str, Dict[str, Any]] = {}
        self.releases: Dict[str, Any] = {}
        # Count per distinct mechanism (sampling, q, z), in first-charged order: steps, or
        # Gaussian releases for shuffled epochs. Both currencies are functions of these counts
        # (equal public-batch mechanisms merge exactly, Bin(a, q) + Bin(b, q) = Bin(a + b, q)),
        # so charging T rounds epoch by epoch costs exactly what a calibration for T rounds computed.
        self._steps: Dict[tuple, int] = {}
        # The events of the round charges made so far, one per distinct charge (_rounds_event).
        self._round_events: Dict[tuple, MechanismEvent] = {}
        self._spent: Optional[float] = 0.0
        # Writes of the file so far, and the revision of each file this object last read or
        # wrote there (by resolved path; none: it expects no ledger file there).
        self.revision = 0
        self._seen: Dict[str, int] = {}

    # ------------------------------------------------------------------ accounting
    def _with(self, *events: MechanismEvent) -> Dict[tuple, int]:
        """The counts per mechanism with ``events`` added to what is recorded."""
        steps = dict(self._steps)
        for e in events:
            key = (e.sampling, e.sample_rate, e.noise_multiplier)
            steps[key] = steps.get(key, 0) + e.count()
        return steps

    @staticmethod
    def _items(steps: Dict[tuple, int]) -> list:
        return [(s, q, z, t) for (s, q, z), t in steps.items() if t > 0]

    def mechanisms(self) -> tuple:
        """What composes, as ``(sampling, sample_rate, noise_multiplier, count)`` tuples in
        first-charged order: the Rust accountant's input (hashable, for caches keyed on it)."""
        return tuple(self._items(self._steps))

    def epsilons(self, events: Optional[List[MechanismEvent]] = None) -> Dict[str, float]:
        """ε of what is recorded (plus ``events``) by each accountant: ``"rdp"`` (always valid),
        ``"exact"`` (``inf`` unless every event is Gaussian given public information), ``"pld"``
        (``inf`` unless some event hides its batch)."""
        rdp, exact, pld = _core.ledger_epsilons(self._items(self._with(*(events or []))), self.delta)
        return {"rdp": float(rdp), "exact": float(exact), "pld": float(pld)}

    def _epsilon_of(self, steps: Dict[tuple, int]) -> float:
        items = self._items(steps)
        if not items:
            return 0.0
        return float(min(_core.ledger_epsilons(items, self.delta)))

    def epsilon_spent(self) -> float:
        """ε of all recorded events at the budget's δ (0 if none): the minimum of the RDP, the
        exact and the PLD account (all upper bounds). Cached until the next charge."""
        if self._spent is None:
            self._spent = self._epsilon_of(self._steps)
        return self._spent

    def remaining(self) -> float:
        """Budget left, ``epsilon − epsilon_spent()`` (never below 0)."""
        return max(0.0, self.epsilon - self.epsilon_spent())

    def epsilon_with(self, events: List[MechanismEvent]) -> float:
        """ε spent if ``events`` were recorded on top of what is recorded now."""
        return self._epsilon_of(self._with(*events))

    def would_exceed(self, event: MechanismEvent) -> bool:
        """Whether recording ``event`` would make ε exceed the budget."""
        if not isinstance(event, MechanismEvent):
            raise TypeError(f"event must be a MechanismEvent; got {type(event).__name__}")
        return not _core.ledger_admits(self._items(self._with(event)), self.delta, self.epsilon)

    def charge(self, event: MechanismEvent) -> float:
        """Record ``event`` if it fits the budget; return the new ε spent.

        Raises :class:`PrivacyBudgetExceeded` (nothing is recorded) if it does not fit.
        """
        steps = self._admit(event)
        self._record(event, steps)
        self._write_through()
        return self.epsilon_spent()

    def _admit(self, event: MechanismEvent) -> Dict[tuple, int]:
        """The counts after ``event``, or :class:`PrivacyBudgetExceeded` if it does not fit.
        One Rust call: the exact δ at the budget when it applies (cached Gaussian factors),
        else RDP (cached per-step curves)."""
        if not isinstance(event, MechanismEvent):
            raise TypeError(f"event must be a MechanismEvent; got {type(event).__name__}")
        steps = self._with(event)
        if not _core.ledger_admits(self._items(steps), self.delta, self.epsilon):
            raise self._refusal(event, steps)
        return steps

    def _record(self, event: MechanismEvent, steps: Dict[tuple, int]) -> None:
        self.events.append(event)
        self._steps, self._spent = steps, None

    # ------------------------------------------------------------------ runs and rounds
    def begin_run(self, run_id: str, *, sampling: str, sample_rate: float, noise_multiplier: float,
                  planned_steps: int, rounds_per_epoch: Optional[int] = None, prepaid: bool = False) -> None:
        """Register a training run: the mechanism of each of its rounds and how many it plans.
        Unless ``prepaid``, nothing is charged; :meth:`charge_rounds` charges rounds as they are
        answered. A run id registered before must come with the same mechanism (that is a resume).

        ``prepaid=True`` (runs calibrated by the PLD, ``calibration="pld"``): all
        ``planned_steps`` rounds are charged now, as one event, or
        :class:`PrivacyBudgetExceeded` is raised and nothing is recorded; :meth:`charge_rounds`
        then only checks the plan and the replay guard. A PLD total is not a valid stopping
        rule (module docstring), so such a run pays for every planned round whether or not it
        answers them. A resume registers the same record and pays nothing again.

        ``sampling="shuffle"``: round r belongs to epoch ``r // b`` with ``b = rounds_per_epoch``
        (default ``⌈1/q⌉``; a larger ``b`` than that is refused, it would under-count epochs),
        and the run costs one Gaussian release per distinct epoch its answered rounds touch."""
        record = {"sampling": sampling, "sample_rate": float(sample_rate),
                  "noise_multiplier": float(noise_multiplier), "planned_steps": int(planned_steps)}
        if prepaid:
            if sampling not in PREPAID_SCHEMES:
                raise ValueError(f"prepaid runs are the PLD-priced hidden batches ({PREPAID_SCHEMES}); got "
                                 f"sampling={sampling!r}")
            record["prepaid"] = True
        if sampling == "shuffle":
            most = int(_core.shuffle_rounds_per_epoch(float(sample_rate)))
            b = most if rounds_per_epoch is None else int(rounds_per_epoch)
            if not 1 <= b <= most:
                raise ValueError(f"rounds_per_epoch must be in [1, ceil(1/sample_rate) = {most}]; got {b}")
            record["rounds_per_epoch"] = b
        elif rounds_per_epoch is not None:
            raise ValueError("rounds_per_epoch is for sampling='shuffle' only")
        old = self.runs.get(run_id)
        if old is not None:
            same = {k: old.get(k) for k in record} == record and bool(old.get("prepaid")) == prepaid
            if not same:
                raise LedgerMismatch(f"{self._who()}: run {run_id!r} was registered with {old}, not {record}; "
                                     "a resumed run must keep its noise plan")
            return
        event = MechanismEvent(name="steffle_rounds", sampling=sampling, sample_rate=sample_rate,
                               noise_multiplier=noise_multiplier, steps=int(planned_steps) if prepaid else 1)
        if prepaid:  # the whole plan, before anything is recorded of the run
            self._record(event, self._admit(event))
        self.runs[run_id] = {**record, "next_round": 0}
        if sampling == "shuffle":
            self.runs[run_id]["last_epoch"] = -1
        self._write_through()

    def next_round(self, run_id: str) -> int:
        """The first round of ``run_id`` not yet answered (0 for an unknown run)."""
        return int(self.runs.get(run_id, {}).get("next_round", 0))

    def charge_rounds(self, run_id: str, first_round: int, count: int = 1) -> None:
        """Charge rounds ``first_round .. first_round + count`` of a registered run.

        Rounds are answered at most once and in increasing order: a silo that missed rounds (it
        was down) may skip them, and can never answer them later. Raises :class:`ReplayRefused`
        for a round at or before one already answered, :class:`PrivacyBudgetExceeded` past the
        plan or the budget; nothing is recorded then. For a shuffle run the rounds cost the
        epochs they touch that no earlier charge touched. Returns nothing (the ε spent is
        :meth:`epsilon_spent`, computed on demand so that a charge stays one cheap Rust call).
        :func:`charge_rounds_together` charges many ledgers in one Rust call."""
        pending = self._rounds_event(run_id, first_round, count)
        steps = self._steps if pending[0] is None else self._admit(pending[0])
        self._commit_rounds(run_id, first_round, count, pending, steps)

    def _rounds_event(self, run_id: str, first_round: int, count: int) -> tuple:
        """The event that rounds ``first_round ..`` of ``run_id`` would record (``None`` for a
        prepaid run: paid when registered), and the epoch a shuffle run would have touched last;
        refuses replays and rounds past the plan. The event is one frozen object per distinct
        charge (mechanism, rounds, epochs touched), kept by the ledger and recorded again each
        time that charge is made: a run charges the same epoch after epoch."""
        run = self.runs.get(run_id)
        if run is None:
            raise KeyError(f"{self._who()}: run {run_id!r} is not registered; call begin_run first")
        count = int(count)
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        nxt = run["next_round"]
        if first_round < nxt:
            raise ReplayRefused(
                f"{self._who()}: round {first_round} of run {run_id!r} was already answered (or skipped); the "
                f"ledger answers each round at most once, in increasing order (next possible: round {nxt})"
            )
        if first_round + count > run["planned_steps"]:
            raise PrivacyBudgetExceeded(
                f"{self._who()}: run {run_id!r} planned {run['planned_steps']} rounds; rounds "
                f"{first_round}..{first_round + count - 1} go past that plan, which its noise was not calibrated for"
            )
        if run.get("prepaid"):
            return None, None
        epochs = last = None
        if run["sampling"] == "shuffle":
            b = int(run["rounds_per_epoch"])
            e0, last = first_round // b, (first_round + count - 1) // b
            epochs = last - e0 + 1 - (1 if e0 == run["last_epoch"] else 0)
        key = (run["sampling"], run["sample_rate"], run["noise_multiplier"], count, epochs)
        cache = self.__dict__.setdefault("_round_events", {})
        event = cache.get(key)
        if event is None:  # one frozen event per distinct charge: epoch after epoch it is the same one
            if len(cache) > 64:
                cache.clear()
            event = cache[key] = MechanismEvent._trusted("steffle_rounds", run["sampling"], float(run["sample_rate"]),
                                                         float(run["noise_multiplier"]), count, epochs)
        return event, last

    def _commit_rounds(self, run_id: str, first_round: int, count: int, pending: tuple,
                       steps: Dict[tuple, int]) -> None:
        event, last = pending
        if event is not None:
            self._record(event, steps)
        run = self.runs[run_id]
        run["next_round"] = first_round + int(count)
        if last is not None:
            run["last_epoch"] = last
        self._write_through()

    def _refusal(self, event: MechanismEvent, steps: Dict[tuple, int]) -> PrivacyBudgetExceeded:
        spent = self.epsilon_spent()
        after = self._epsilon_of(steps)
        return PrivacyBudgetExceeded(
            f"{self._who()}: charging {event.name!r} ({event.sampling}, sample_rate={event.sample_rate:g}, "
            f"noise_multiplier={event.noise_multiplier:g}, steps={event.steps}) would raise epsilon "
            f"from {spent:.4g} to {after:.4g}, over the budget epsilon={self.epsilon:g} at delta={self.delta:g}; "
            f"remaining epsilon={max(0.0, self.epsilon - spent):.4g}. The silo refuses to answer."
        )

    def _write_through(self) -> None:
        if self.path is not None:
            self.save(self.path)

    # ------------------------------------------------------------------ binding
    def bind(self, fingerprint: str, legacy: Optional[Callable[[], str]] = None) -> "PrivacyLedger":
        """Bind the ledger to a silo's data (its :func:`data_fingerprint`); refuse a ledger bound to
        other data. A ledger bound by an older pfair holds a :func:`legacy_fingerprint`: ``legacy``
        computes that of the silo's data, and on a match the ledger is re-bound to ``fingerprint``."""
        if self.fingerprint is None:
            self.fingerprint = fingerprint
            self._write_through()
        elif (self.fingerprint != fingerprint and legacy is not None
              and not self.fingerprint.startswith(FINGERPRINT_PREFIX) and self.fingerprint == legacy()):
            self.fingerprint = fingerprint
            self._write_through()
        elif self.fingerprint != fingerprint:
            raise LedgerMismatch(
                f"{self._who()}: this ledger accounts for other data (its fingerprint is not the silo's data's); pass "
                "the ledger that belongs to this silo. (The fingerprints are in the ledger file and "
                "pfair.privacy.data_fingerprint; they are not in this message, which a deployed silo sends to the "
                "server: a hash of the data would let a server that knows all other records test the last one.)"
            )
        return self

    def release(self, name: str, value: Any = None) -> Any:
        """Remember (with ``value``) or look up (without) a value the silo has released."""
        if value is None:
            return self.releases.get(name)
        self.releases[name] = value
        self._write_through()
        return value

    def _who(self) -> str:
        return "silo" if self.silo is None else f"silo {self.silo!r}"

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """Everything needed to restore the ledger, plus a report (spent, remaining)."""
        spent = self.epsilon_spent()
        return {
            "format": LEDGER_FORMAT,
            "revision": self.revision,
            "silo": self.silo,
            "epsilon_budget": self.epsilon,
            "delta": self.delta,
            "fingerprint": self.fingerprint,
            "epsilon_spent": spent,
            "epsilon_remaining": max(0.0, self.epsilon - spent),
            "events": [{k: v for k, v in asdict(e).items() if v is not None} for e in self.events],
            "runs": {k: dict(v) for k, v in self.runs.items()},
            "releases": {k: np.asarray(v).tolist() for k, v in self.releases.items()},
            "anchored": bool(self.anchored or self.anchor is not None),
            "epsilon_by_accountant": self.epsilons(),
            "accountant": "min of RDP (public batch / WBK 2019 / MTZ 2019, Balle et al. 2020 conversion), the exact "
                          "Gaussian mixture (Balle-Wang 2018, Dong-Roth-Su 2019) when every event is Gaussian given "
                          "public information, and the PLD of every event's dominating pair (Zhu-Dong-Wang 2022, "
                          "connect-the-dots discretisation) when some event hides its batch; replace-one adjacency",
        }

    @classmethod
    def from_dict(cls, data: dict, *, path: Optional[os.PathLike | str] = None) -> "PrivacyLedger":
        """Restore a ledger from :meth:`to_dict`; the events are replayed and checked against the budget."""
        if data.get("format") not in READABLE_FORMATS:
            raise ValueError(f"unknown ledger format {data.get('format')!r}; this pfair reads formats "
                             f"{READABLE_FORMATS} and writes format {LEDGER_FORMAT} (a newer pfair wrote this file?)")
        silo = data.get("silo")
        ledger = cls(epsilon=data["epsilon_budget"], delta=data["delta"], silo=silo,
                     fingerprint=data.get("fingerprint"))
        for e in data.get("events", []):
            event = MechanismEvent(**e)
            ledger._record(event, ledger._admit(event))  # refuses events past the budget
        ledger.runs = {k: dict(v) for k, v in data.get("runs", {}).items()}
        for rid, run in ledger.runs.items():
            if run.get("sampling") == "shuffle":
                b, last, nxt = run.get("rounds_per_epoch"), run.get("last_epoch"), run.get("next_round", 0)
                most = int(_core.shuffle_rounds_per_epoch(float(run["sample_rate"])))
                if not (isinstance(b, int) and 1 <= b <= most and isinstance(last, int)
                        and (last == (nxt - 1) // b if nxt > 0 else last == -1)):
                    raise ValueError(f"ledger run {rid!r}: inconsistent shuffle record {run} (rounds_per_epoch, "
                                     "last_epoch and next_round disagree); the ledger file is corrupt")
        ledger.releases = {k: np.asarray(v, dtype=np.float64) for k, v in data.get("releases", {}).items()}
        ledger.path = resolved(path) if path is not None else None
        ledger.revision = int(data.get("revision", 0))
        ledger.anchored = bool(data.get("anchored", False))
        if ledger.path is not None and ledger.path.exists():
            ledger._seen[str(ledger.path)] = ledger.revision
        return ledger

    def save(self, path: os.PathLike | str) -> None:
        """Write the ledger as JSON, atomically (a crash never leaves half a ledger), through
        :func:`pfair.privacy.ledger_file.write_ledger`: a ledger file already at ``path`` is
        replaced only if it is the revision this object last read or wrote there; otherwise
        :class:`LedgerConflict` is raised and nothing is written (another process charged that
        ledger meanwhile, or it is another ledger this object never read: replacing it would erase
        its charges). Links are followed, so every name of one file is one ledger."""
        target = resolved(path)
        before = self.revision

        def content(found: Optional[int]) -> bytes:
            # Never backwards: no stale object matches again.
            self.revision = max(found or 0, self.revision) + 1
            return self.revision, json.dumps(self.to_dict(), indent=1).encode()

        try:
            write_ledger(target, content, seen=self._seen.get(str(target)), anchor=self.anchor,
                         anchored=self.anchored, who=self._who())
        except BaseException:
            self.revision = before
            raise
        self._seen[str(target)] = self.revision

    @classmethod
    def load(cls, path: os.PathLike | str, *, anchor: Optional[os.PathLike | str] = None) -> "PrivacyLedger":
        """Read a ledger written by :meth:`save`; later changes are written back to ``path``.
        Refuses (:class:`~pfair.exceptions.LedgerRollback`) a file older than its journals say,
        and (:class:`~pfair.exceptions.LedgerConflict`) a file that is no ledger (e.g. truncated)
        (:func:`pfair.privacy.ledger_file.read_ledger`)."""
        ledger = cls.from_dict(read_ledger(path, anchor), path=path)
        ledger.anchor = Path(anchor) if anchor is not None else None
        return ledger

    def __repr__(self) -> str:
        return (f"PrivacyLedger(silo={self.silo!r}, epsilon={self.epsilon}, delta={self.delta}, "
                f"spent={self.epsilon_spent():.4g}, events={len(self.events)})")


#: Schemes of runs that may be prepaid (charged in full when registered): the hidden batches the
#: PLD currency prices (``calibration="pld"``).
PREPAID_SCHEMES = ("without_replacement", "poisson_replace_one")

#: Batch schemes whose rounds are Gaussian given public information with a fixed count per record
#: (a record is in exactly one batch an epoch, or in every batch): the ledger's ε of a history of
#: them (and of full-batch releases) is a sum of μ²'s, a privacy filter that stays valid whoever
#: decides, from earlier answers, when a run stops and which run comes next (Smith and Thakurta,
#: "Fully Adaptive Composition for Gaussian Differential Privacy", 2022). Random batches
#: (without replacement, Poisson) are accounted by how often a record is drawn, averaged over the
#: draws: valid for lengths fixed in advance only.
FILTER_SCHEMES = ("shuffle", "full_batch")


def charge_rounds_together(charges: List[tuple], first_round: int, count: int) -> List[Optional[Exception]]:
    """Charge rounds ``first_round .. first_round + count`` of one run per ledger, for many
    ledgers at once: ``charges`` is a list of ``(ledger, run_id)``. Every ledger is checked as
    :meth:`PrivacyLedger.charge_rounds` checks it, but the budget test of all of them is one Rust
    call (``ledgers_admit``: equal ledgers, e.g. silos of one size, are evaluated once; distinct
    ones in parallel). Returns, per entry, ``None`` (charged) or the exception that
    ``charge_rounds`` would have raised (:class:`PrivacyBudgetExceeded`, :class:`ReplayRefused`);
    a refused ledger records nothing."""
    out: List[Optional[Exception]] = [None] * len(charges)
    if len({id(ledger) for ledger, _ in charges}) < len(charges):
        # One ledger for several runs: each charge must see the ones before it.
        for i, (ledger, run_id) in enumerate(charges):
            try:
                ledger.charge_rounds(run_id, first_round, count)
            except (PrivacyBudgetExceeded, ReplayRefused) as exc:
                out[i] = exc
        return out
    ready, entries = [], []
    for i, (ledger, run_id) in enumerate(charges):
        try:
            pending = ledger._rounds_event(run_id, first_round, count)
        except (PrivacyBudgetExceeded, ReplayRefused) as exc:
            out[i] = exc
            continue
        if pending[0] is None:  # a prepaid run: its rounds were charged when it was registered
            ledger._commit_rounds(run_id, first_round, count, pending, ledger._steps)
            continue
        steps = ledger._with(pending[0])
        ready.append((i, ledger, run_id, pending, steps))
        entries.append((PrivacyLedger._items(steps), ledger.delta, ledger.epsilon))
    admitted = _core.ledgers_admit(entries) if ready else []
    for ok, (i, ledger, run_id, pending, steps) in zip(admitted, ready):
        if ok:
            ledger._commit_rounds(run_id, first_round, count, pending, steps)
        else:
            out[i] = ledger._refusal(pending[0], steps)
    return out


