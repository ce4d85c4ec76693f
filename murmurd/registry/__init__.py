"""Artifacts from outside: `.mur.zip` archives, the project and global stores, GitHub release and
Nexus sources, `murmur.lock` as upstream writes it, and murmurd's own Nexus-compatible server.

Formats, paths, codes and messages are upstream `mur`'s (docs/registry.md)."""
