"""The one place pfair makes a progress bar (``progress_bar``), so every bar follows the same rule:

a bar is drawn only where someone can watch it -- standard error is a terminal, or the code runs
in a Jupyter kernel -- and never into a redirected log (``pfair train ... 2> log.txt``, a batch
job, CI), where tqdm would write one carriage-return line per update.  Two environment
variables override the rule: ``PFAIR_PROGRESS=0`` hides every bar, ``PFAIR_PROGRESS=1`` shows
them even when standard error is redirected; tqdm's own ``TQDM_DISABLE=1`` also hides them.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional

__all__ = ["progress_bar", "progress_wanted"]


def _in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session, whose standard error is not a terminal but
    is shown to the user."""
    return "ipykernel" in sys.modules


def progress_wanted(enabled: bool = True) -> bool:
    """Whether a bar asked for with ``enabled`` should be drawn (see the module docs)."""
    if not enabled:
        return False
    forced = os.environ.get("PFAIR_PROGRESS", "").strip().lower()
    if forced in ("0", "false", "no", "off"):
        return False
    if forced in ("1", "true", "yes", "on"):
        return True
    if os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes"):
        return False
    stream = sys.stderr
    try:
        tty = bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        tty = False
    return tty or _in_notebook()


def progress_bar(iterable: Optional[Iterable[Any]] = None, *, enabled: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(iterable, **kwargs)``, disabled unless :func:`progress_wanted`.

    A disabled bar still iterates, counts and accepts ``update``/``set_postfix``/``close``, so
    callers need no second code path.
    """
    from tqdm.auto import tqdm  # lazy: loaded when a bar is made (the ClientApp imports this module)

    return tqdm(iterable, disable=not progress_wanted(enabled), **kwargs)
