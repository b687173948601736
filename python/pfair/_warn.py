"""Warnings a user reads once: :func:`warn_once` shows a warning of one kind once per process.

A private fit inside scikit-learn's cross-validation runs once per fold and candidate; the same
long warning printed ten times hides everything else. Python's ``default`` action would show it
once per code location, but every ``warnings.catch_warnings`` block (pfair's fits use them)
resets that record. So pfair keeps its own: a kind already shown is not shown again, unless the
active filter for it is ``always`` or ``error`` (``pytest.warns``, ``catch_warnings(record=True)``
with ``simplefilter("always")``, ``-W error``), which are honoured every time.
"""

from __future__ import annotations

import re
import warnings
from typing import Hashable

_SHOWN: set = set()


def _every_time(category: type, message: str) -> bool:
    """Whether the first warnings filter that matches asks for every occurrence."""
    for action, msg, cat, _module, _lineno in warnings.filters:
        if not issubclass(category, cat):
            continue
        if msg is not None and not (msg.match(message) if hasattr(msg, "match") else re.match(msg, message, re.I)):
            continue
        return action in ("always", "error")
    return False


def warn_once(message: str, category: type = UserWarning, *, kind: Hashable = None, stacklevel: int = 2) -> None:
    """``warnings.warn(message, category)``, once per process for each ``kind`` (default: the
    message itself), unless the active filter asks for every occurrence."""
    key = (category, message if kind is None else kind)
    if key in _SHOWN and not _every_time(category, message):
        return
    _SHOWN.add(key)
    warnings.warn(message, category, stacklevel=stacklevel + 1)


def forget() -> None:
    """Show every kind again (tests)."""
    _SHOWN.clear()
