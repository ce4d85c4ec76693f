"""The HTTP edge of a served capsule: the ASGI app, its routes, authentication and limits."""
