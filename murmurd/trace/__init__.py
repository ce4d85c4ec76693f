"""The session trace: `trace.jsonl`, one event per line."""
