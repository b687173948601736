"""Writing a bench's table into a Markdown page, between the markers of a named block, so that the
docs hold the scripts' own output (``docs/performance.md``, ``docs/dev/epoch_profile.md``)."""

from __future__ import annotations

import os


def write_between_markers(path: str, table: str, script: str, section: str) -> None:
    """Replace the text between the markers of block ``section`` of ``script`` in ``path``
    (appended at the end when the page has no such block) by ``table``."""
    begin, end = f"<!-- {script} {section}: begin -->", f"<!-- {script} {section}: end -->"
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{begin}\n{table}{end}"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + block + text[b:]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    with open(path, "w") as f:
        f.write(text)
