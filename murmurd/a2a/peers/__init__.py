"""The calling side of A2A: a capsule's calls to its peers, and a terminal's calls to a daemon."""
