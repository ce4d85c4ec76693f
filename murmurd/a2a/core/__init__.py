"""The daemon core: tasks, their admission and scheduling, the session pool, the event log.

It knows nothing of HTTP (`murmurd.a2a.http` imports it, never the reverse) nor of replicas
(it talks to a `Coordination`; the PostgreSQL one lives in `murmurd.a2a.replicas`).
"""
