"""Evals: reading `eval.jsonl` (`murmurd eval show | diff`) and rerunning a task set (`run`).

The scoring itself is the bundled hook `murmur-hook-eval` (an ordinary WASM hook, run by the
hooks runtime at session end); this package reads what it wrote.
"""
