"""Shell containment: what the kernel enforces on every shell child beyond its environment.

A base layer (no murmurd imports; what the helper imports is standard library only, the
relay's DNS stub uses dnslib): the manifest, staging and session
layers read its plan; `child.py` runs as its own process between murmurd and each command. See
docs/containment.md. Nothing is imported here, so the exec'd helper stays cheap to start.
"""
