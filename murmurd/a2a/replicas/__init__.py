"""Several `murmurd serve` replicas on one PostgreSQL database (issue 17).

`events`: the capsule's event log shared through the database (ids from one sequence, pushed
with LISTEN/NOTIFY, replayed by `Last-Event-ID` on any replica). `coordinator`: who runs what
(a task claimed by exactly one replica, a context leased to one replica at a time, heartbeats,
a dead replica's tasks failed or handed on), and replies and cancels carried to the owner.
"""
