"""Staging: resolve, verify and install a capsule's artifacts into a fresh session workdir."""
