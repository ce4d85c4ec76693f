"""The A2A daemon: JSON-RPC dialects, the task store, SSE streams, session workers, peers."""
