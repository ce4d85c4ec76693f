"""One store's `wasi:http` egress, and the record of a refused request.

The call context carries an `HttpEgress` (`CallContext.egress`) and a session receives each
`EgressDenial` (`SessionContext.egress_denied`); the filter that fills them in is
`http_policy.py`. Kept apart from both so that neither the context nor the policy imports the
other to name these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from murmurd.host.egress import EgressPolicy
from murmurd.host.http_forwarder import Forwarder, ForwarderSource

OUTGOING_HANDLER = "wasi:http/outgoing-handler"
EGRESS_DENIED = "egress_denied"  # the trace event a refusal becomes


@dataclass(frozen=True)
class EgressDenial:
    """A refused request, as the session traces it (`egress_denied`)."""

    artifact: str
    interface: str
    reason: str
    origin: str | None = None  # `scheme://host:port` when the request named one we could read
    scheme: str | None = None
    authority: str | None = None

    def fields(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "interface": self.interface, "origin": self.origin,
                "scheme": self.scheme, "authority": self.authority, "reason": self.reason}


@dataclass
class HttpEgress:
    """One store's `wasi:http` egress: its policy, and the forwarder once a request needs it."""

    policy: EgressPolicy
    source: ForwarderSource
    version: str
    _forwarder: Forwarder | None = field(default=None, repr=False)
    denials: int = 0

    def forwarder(self, store: Any) -> Forwarder:
        if self._forwarder is None:
            self._forwarder = Forwarder.instantiate(store, self.source, self.version)
        return self._forwarder
