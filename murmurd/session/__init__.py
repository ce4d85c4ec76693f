"""The session core: the agent loop and everything a task needs while it runs."""
