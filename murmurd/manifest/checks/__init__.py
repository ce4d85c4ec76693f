"""The rules of `murmur.yaml` validation, one module per manifest section (and per pass).

`murmurd.manifest.validate` composes them; each rule takes the raw mapping (a `Context`) and
returns diagnostics, never raising and never stopping at the first problem.
"""
