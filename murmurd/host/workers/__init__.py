"""WASM worker processes: tool and driver calls run in processes of their own (`processes.py`,
the daemon's side; `worker.py`, the worker's), over the frames of `frames.py`."""
