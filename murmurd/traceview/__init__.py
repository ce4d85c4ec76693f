"""Reading what a session did: `murmurd trace show | steps | diff | report` (upstream's `mur trace`).

Pure modules (`parse`, `metrics`, `redundancy`, `compare`, `aggregate`) turn trace lines into
numbers; `sessions` finds traces on disk; `render` and `html` present them; `commands` wires
them to the CLI with upstream's error codes.
"""
