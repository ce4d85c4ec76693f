"""Where murmurd keeps machine-wide state (caches). Nothing here is per-session."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$MURMUR_CACHE_DIR`, else `$XDG_CACHE_HOME/murmurd`, else `~/.cache/murmurd`."""
    explicit = os.environ.get("MURMUR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "murmurd"
