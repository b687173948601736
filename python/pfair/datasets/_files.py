"""Where the bundled data files live, and a cache for the parsed raw tables.

The files under ``data/`` ship inside the wheel (``[tool.maturin] include`` in pyproject.toml);
nothing is ever fetched from the network.  Provenance and licences: ``DATASETS.md``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, TypeVar

import pandas as pd

DATA_DIR = Path(__file__).resolve().parent / "data"

F = TypeVar("F", bound=Callable[[], pd.DataFrame])


def data_path(filename: str) -> Path:
    """Absolute path of a bundled data file; a clear error if the installation lacks it."""
    path = DATA_DIR / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"bundled data file {filename!r} not found in {DATA_DIR}; the pfair installation is "
            "incomplete (the wheel must include python/pfair/datasets/data/*)"
        )
    return path


def cached_table(reader: F) -> F:
    """Parse a bundled file once per process.

    Each call returns a deep copy of the cached frame, so a caller that edits it in place (with or
    without pandas copy-on-write) cannot change what the next loader sees.
    """
    cached = functools.lru_cache(maxsize=None)(reader)

    @functools.wraps(reader)
    def wrapper() -> pd.DataFrame:
        return cached().copy(deep=True)

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
