"""Authentication at the A2A edge (docs/security.md).

- `tokens`: SHA-256 digests, constant-time comparison;
- `principal`: the principal a credential proves, the narrowing rule, who may answer a task;
- `config`: the credentials file (pydantic) and `--token-file`;
- `verify`: which principal a request's credential (or a GET stream's ticket) proves;
- `edge`: the ASGI middleware (401/403 before any route), the exempt paths;
- `tls`: the server's TLS context and the client certificate's subject;
- `outbound`: the token murmurd presents to each peer.
"""
