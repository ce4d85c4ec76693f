"""The daemon core: tasks, their admission and scheduling, the session pool, the event log.

It knows nothing of HTTP (`murmurd.a2a.http` imports it, never the reverse) nor of where else
its tasks may run: it talks to a `coordination.Coordination` (`LocalCoordination` here; the one
for several daemons on a shared store lives outside the core, chosen by `murmurd.a2a.serve`).
"""
