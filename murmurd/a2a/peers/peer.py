"""The sending side of capsule-to-capsule messaging (`murmur:message/send`).

The runtime builds the JSON-RPC `message/send` request, so the capsule never sees the wire
format, and stamps what the capsule cannot set: a W3C `traceparent`, `x-murmur-task-origin:
peer`, the sending task's trust class and, when one is configured for that peer, its bearer
token (`peers:` in the credentials file).
"""

from __future__ import annotations

import secrets

import httpx

from murmurd.a2a.peers.outbound import PeerHeaders, PeerTokens
from murmurd.host import ImportFailed
from murmurd.host.context import PeerTask
from murmurd.trace.writer import TraceWriter

ORIGIN_HEADER = "x-murmur-task-origin"
TRUST_HEADER = "x-murmur-task-trust"


def new_traceparent() -> str:
    """A fresh W3C traceparent (version 00, sampled)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


class PeerClient:
    """Sends `message/send` to peers over one pooled httpx client."""

    def __init__(self, trace: TraceWriter | None, *, timeout: float = 30.0,
                 client: httpx.AsyncClient | None = None, tokens: PeerHeaders | None = None) -> None:
        """`client`: another PeerClient's connection pool to share (one per daemon: building
        one loads the CA bundle, ~20 ms of the event loop); it stays open when this one closes.
        `tokens`: the bearer token to present to each peer."""
        self.trace = trace
        self.tokens: PeerHeaders = tokens or PeerTokens()
        self._owns_client = client is None
        self.client = client or httpx.AsyncClient(timeout=timeout)

    async def send(
        self,
        peer_url: str,
        message_id: str,
        context_id: str | None,
        text: str,
        *,
        trust: str,
        traceparent: str | None = None,
    ) -> PeerTask:
        """Send; `traceparent` is the sender's current span (tracing on), else a fresh one is minted."""
        traceparent = traceparent or new_traceparent()
        message: dict = {"messageId": message_id, "role": "user", "parts": [{"text": text}]}
        if context_id:
            message["contextId"] = context_id
        body = {"jsonrpc": "2.0", "id": message_id, "method": "message/send", "params": {"message": message}}
        headers = {"traceparent": traceparent, ORIGIN_HEADER: "peer", TRUST_HEADER: trust,
                   **self.tokens.headers_for(peer_url)}
        try:
            response = await self.client.post(peer_url, json=body, headers=headers)
            payload = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ImportFailed(f"message/send to {peer_url}: {type(exc).__name__}: {exc}") from None
        if not isinstance(payload, dict):
            raise ImportFailed(f"message/send to {peer_url}: not a JSON-RPC response")
        if "error" in payload:
            error = payload["error"] or {}
            raise ImportFailed(f"message/send to {peer_url}: peer error {error.get('code')}: {error.get('message')}")
        task = payload.get("result") or {}
        status = task.get("status") or {}
        result = PeerTask(str(task.get("id", "")), str(task.get("contextId", "")), str(status.get("state", "")))
        if self.trace is not None:
            self.trace.write("a2a_send", peer_url=peer_url, message_id=message_id, task_id=result.task_id,
                             context_id=result.context_id, traceparent=traceparent)
        return result

    async def close(self) -> None:
        if self._owns_client:
            await self.client.aclose()
