"""The daemon's start-up objects, kept out of the cyclic collector's full passes.

A served daemon holds some 150,000 objects from start-up (its imports, the staged capsule, the
app) for as long as it runs. The collector's full passes walked every one of them: 100-130 ms
of the event loop's CPU each, every few seconds under load, the loop answering nothing
meanwhile. `gc.freeze()` moves them to the collector's permanent generation, which its passes
skip (a full pass after it: 17-20 ms). What is made later is collected as before; a start-up
object that becomes part of a garbage cycle later is never reclaimed (nor what it still
references), which for what lives as long as the process costs nothing. Lazily made caches and
threads of the first requests are not frozen. `docs/decisions.md`, "Issue 29: the start-up heap
frozen".
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collect what start-up left as garbage, then freeze the rest; the objects frozen (read
    here once: `gc.get_freeze_count()` walks the whole frozen list, 3 ms at this size)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
