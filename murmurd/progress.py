"""A long step's progress on the operator's terminal: one line when it starts, one every few
seconds while it lasts, one when it ends (with how long it took). Used for every step that can
take over a second (componentize-py builds, wasmtime compiles) so a cold start never goes quiet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Progress = Callable[[str], None]
EVERY_SECONDS = 5.0


class Ticker:
    """`start()` prints `<label>` and ticks `<label>: 5s`, `10s`, ... from a daemon thread;
    `stop()` ends the ticking and prints `<done> in Ns` when the step was started."""

    def __init__(self, progress: Progress, label: str, done: str, *, every: float = EVERY_SECONDS,
                 first: str | None = None) -> None:
        self._progress, self._label, self._done, self._every = progress, label, done, every
        self._first = first or label
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self._progress(self._first)
        self._thread = threading.Thread(target=self._tick, name=f"progress {self._label}", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            self._progress(f"{self._label}: {time.monotonic() - self._started:.0f}s")

    def stop(self, *, ok: bool = True) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if ok:
            self._progress(f"{self._done} in {time.monotonic() - self._started:.1f}s")

    def __enter__(self) -> Ticker:
        self.start()
        return self

    def __exit__(self, exc_type: object, *_rest: object) -> None:
        self.stop(ok=exc_type is None)
