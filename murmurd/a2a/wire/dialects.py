"""Which A2A dialect a request speaks, and which operation it asks for.

Four dialects share `POST /` and the one task model:

- UPSTREAM: murmur's own peers. A2A 0.3 method names, minimal task JSON (runtime-notes §6).
- V02: A2A 0.1/0.2 `tasks/send` / `tasks/sendSubscribe` (`sessionId`, `type`-tagged parts).
- V03: A2A 0.3 kind-tagged objects (a2a-sdk's v0.3 compatibility transport), same method names
  as UPSTREAM.
- V10: A2A 1.0 (`SendMessage`, ... what a2a-sdk >= 1.0 speaks), ProtoJSON objects.

Detection rule for the method names UPSTREAM and V03 share (`resolve_dialect`):
1. an `A2A-Version` header of 0.3.x (a2a-sdk's compat transport always sends `0.3`) -> V03;
2. `message/send` / `message/stream` whose message carries `"kind"`, or any part of which
   carries `"kind"` -> V03 (upstream peers never send `kind`);
3. `tasks/get` / `tasks/cancel` / `tasks/resubscribe` -> the dialect that created the task when
   the caller passes it (`task_dialect` V02 or V03; these names are also A2A 0.1's);
4. otherwise UPSTREAM.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from murmurd.a2a.wire.jsonrpc import JsonRpcError

VERSION_HEADER = "a2a-version"


class Dialect(str, Enum):
    UPSTREAM = "upstream"
    V02 = "v0.2"
    V03 = "v0.3"
    V10 = "v1.0"


class Operation(str, Enum):
    SEND = "send"
    STREAM = "stream"
    GET = "get"
    CANCEL = "cancel"
    RESUBSCRIBE = "resubscribe"
    WATCH = "watch"
    LIST = "list"
    PUSH_CONFIG = "push-config"  # push-notification config methods: never supported (card says so)
    EXTENDED_CARD = "extended-card"  # the card declares no extended card

    @property
    def streaming(self) -> bool:
        """Answered with `text/event-stream` rather than one JSON-RPC response."""
        return self in (Operation.STREAM, Operation.RESUBSCRIBE, Operation.WATCH)


METHOD_TABLE: Mapping[str, tuple[Dialect, Operation]] = {
    # upstream murmur / A2A 0.3 (the dialect is refined by `resolve_dialect`)
    "message/send": (Dialect.UPSTREAM, Operation.SEND),
    "message/stream": (Dialect.UPSTREAM, Operation.STREAM),
    "tasks/get": (Dialect.UPSTREAM, Operation.GET),
    "tasks/cancel": (Dialect.UPSTREAM, Operation.CANCEL),
    "tasks/resubscribe": (Dialect.UPSTREAM, Operation.RESUBSCRIBE),
    "stream/watch": (Dialect.UPSTREAM, Operation.WATCH),
    # A2A 0.1 / 0.2
    "tasks/send": (Dialect.V02, Operation.SEND),
    "tasks/sendSubscribe": (Dialect.V02, Operation.STREAM),
    # A2A 1.0
    "SendMessage": (Dialect.V10, Operation.SEND),
    "SendStreamingMessage": (Dialect.V10, Operation.STREAM),
    "GetTask": (Dialect.V10, Operation.GET),
    "CancelTask": (Dialect.V10, Operation.CANCEL),
    "SubscribeToTask": (Dialect.V10, Operation.RESUBSCRIBE),
    "ListTasks": (Dialect.V10, Operation.LIST),
    "CreateTaskPushNotificationConfig": (Dialect.V10, Operation.PUSH_CONFIG),
    "GetTaskPushNotificationConfig": (Dialect.V10, Operation.PUSH_CONFIG),
    "ListTaskPushNotificationConfigs": (Dialect.V10, Operation.PUSH_CONFIG),
    "ListTaskPushNotificationConfig": (Dialect.V10, Operation.PUSH_CONFIG),  # the gRPC method's spelling
    "DeleteTaskPushNotificationConfig": (Dialect.V10, Operation.PUSH_CONFIG),
    "GetExtendedAgentCard": (Dialect.V10, Operation.EXTENDED_CARD),
    # A2A 0.3 (only a2a-sdk's compat transport and other 0.3 clients send these)
    "tasks/pushNotificationConfig/set": (Dialect.V03, Operation.PUSH_CONFIG),
    "tasks/pushNotificationConfig/get": (Dialect.V03, Operation.PUSH_CONFIG),
    "tasks/pushNotificationConfig/list": (Dialect.V03, Operation.PUSH_CONFIG),
    "tasks/pushNotificationConfig/delete": (Dialect.V03, Operation.PUSH_CONFIG),
    "agent/getAuthenticatedExtendedCard": (Dialect.V03, Operation.EXTENDED_CARD),
    # A2A 0.1 / 0.2
    "tasks/pushNotification/set": (Dialect.V02, Operation.PUSH_CONFIG),
    "tasks/pushNotification/get": (Dialect.V02, Operation.PUSH_CONFIG),
}

_SHARED_03 = frozenset({"message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe"})


def lookup_method(method: str) -> tuple[Dialect, Operation]:
    """The method's default dialect and its operation, or JsonRpcError(-32601)."""
    try:
        return METHOD_TABLE[method]
    except KeyError:
        raise JsonRpcError.method_not_found(method) from None


def header_version(headers: Mapping[str, str] | None) -> str | None:
    """The `A2A-Version` header, whatever its case (works for plain dicts and Starlette headers)."""
    if not headers:
        return None
    value = headers.get("A2A-Version") or headers.get(VERSION_HEADER)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == VERSION_HEADER), None)
    return value.strip() if isinstance(value, str) else None


def _is_v03_version(version: str | None) -> bool:
    return version is not None and (version == "0.3" or version.startswith("0.3."))


def _message_is_kind_tagged(params: Any) -> bool:
    if not isinstance(params, dict):
        return False
    message = params.get("message")
    if not isinstance(message, dict):
        return False
    if "kind" in message:
        return True
    parts = message.get("parts")
    return isinstance(parts, list) and any(isinstance(p, dict) and "kind" in p for p in parts)


def resolve_dialect(method: str, params: Any = None, headers: Mapping[str, str] | None = None,
                    task_dialect: Dialect | None = None) -> tuple[Dialect, Operation]:
    """The dialect to parse and answer this request in (see the module docstring for the rule),
    and its operation. Raises JsonRpcError(-32601) for an unknown method."""
    dialect, operation = lookup_method(method)
    if method not in _SHARED_03:
        return dialect, operation
    if _is_v03_version(header_version(headers)):
        return Dialect.V03, operation
    if operation in (Operation.SEND, Operation.STREAM):
        return (Dialect.V03 if _message_is_kind_tagged(params) else Dialect.UPSTREAM), operation
    if task_dialect in (Dialect.V02, Dialect.V03):
        return task_dialect, operation
    return Dialect.UPSTREAM, operation
