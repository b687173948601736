"""Deprecated name of :mod:`pfair.protocol.topologies` (the parties of the hybrid topologies).

"Hybrid" names the hybrid topologies only (``SteFFLe(mode="divisions" | "central_sensitive" |
"hybrid")``); their module is now ``pfair.protocol.topologies``. Every name read from here is
that module's, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

from pfair.protocol import topologies as _topologies


def __getattr__(name: str) -> Any:
    value = getattr(_topologies, name)
    warnings.warn(f"pfair.protocol.hybrid is now pfair.protocol.topologies: import {name} from there",
                  DeprecationWarning, stacklevel=2)
    return value
