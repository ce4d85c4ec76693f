"""Manifest models: the capsule's `murmur.yaml` and each artifact's own `murmur.yaml`."""
