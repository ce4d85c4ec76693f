"""Shared code of murmurd's bundled inference drivers (built into each through `python_path:`).

`sse`, `retry`, `settings`, `errors` and `usage` are standard library only, so tests import
them under CPython; `wasi_http` and `clock` use the guest bindings of world `driver-http`.
"""
