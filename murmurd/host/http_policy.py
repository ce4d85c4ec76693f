"""Per-origin egress for `wasi:http`: a request reaches exactly the origins the grant lists.

wasmtime's `wasi:http` is registered (its types and its client), then
`outgoing-handler#handle` is shadowed, under the exact version the component imports, by
`_handle`. It reads the request's scheme and authority through the forwarder
(`http_forwarder.py`, instantiated in the same store from the native `wasi:http`), and either
forwards the request to the native `handle` or drops it and answers the WASI error code
`HTTP-request-denied`, before any connection is opened. A refusal is reported to the session
(`SessionContext.egress_denied`), which traces it.

Without a grant no forwarder is ever instantiated: every request is refused at once. The
store's egress state and the refusal record are `http_egress.py`'s; import them from there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from wasmtime import WasmtimeError
from wasmtime.component import Linker, ResourceAny, Variant

from murmurd.host.context import CallContext
from murmurd.host.frozen_types import add_func
from murmurd.host.egress import request_origin
from murmurd.host.http_egress import OUTGOING_HANDLER, EgressDenial
from murmurd.host.imports import call_context

DENIED = "HTTP-request-denied"
_SHOWN_AUTHORITY = 256  # characters of a refused authority kept in the trace
_SHOWN_SCHEME = 64
# Refusals traced per store (a call; a hook's session): a component looping on refused requests
# must not grow the trace without end. Every later request is still refused, untraced.
MAX_TRACED_DENIALS = 100

__all__ = ["DENIED", "MAX_TRACED_DENIALS", "define_http_filter"]


def _drop(store: Any, *resources: Any) -> None:
    for resource in resources:
        if isinstance(resource, ResourceAny):
            resource.drop(store)


def _refuse(store: Any, call: CallContext, request: Any, options: Any, denial: EgressDenial) -> Variant:
    _drop(store, request, options)
    egress = call.egress
    seen = egress.denials if egress is not None else 0
    if egress is not None:
        egress.denials += 1
    if seen < MAX_TRACED_DENIALS:
        call.session.egress_denied(denial)
    elif seen == MAX_TRACED_DENIALS:
        call.session.egress_denied(replace(denial, reason=f"{denial.reason}; {MAX_TRACED_DENIALS} refusals traced, "
                                           "no further refusals of this component are traced"))
    return Variant(DENIED)


def _handle(store: Any, request: Any, options: Any) -> Any:
    call = call_context(store)
    egress = call.egress
    interface = f"{OUTGOING_HANDLER}#handle"
    if egress is None or not egress.policy:
        return _refuse(store, call, request, options, EgressDenial(call.artifact, interface, "no network grant"))
    forwarder = egress.forwarder(store)
    scheme, authority = forwarder.target(store, request)
    origin = request_origin(scheme, authority)
    if not egress.policy.allows(origin):
        reason = ("not in capabilities.network.allow" if origin is not None
                  else "the request names no http(s) origin that can be checked")
        shown = authority[:_SHOWN_AUTHORITY] if authority is not None else None
        scheme = scheme[:_SHOWN_SCHEME] if scheme is not None else None
        denial = EgressDenial(call.artifact, interface, reason, str(origin) if origin else None, scheme, shown)
        return _refuse(store, call, request, options, denial)
    if call.guard.gate is not None:
        call.guard.gate.leave()  # the answer is awaited inside wasmtime, out of the gate's sight
    return forwarder.forward(store, request, options)


def _guarded_handle(store: Any, request: Any, options: Any) -> Any:
    """`_handle`, with any failure of the policy itself made a trap that names it."""
    try:
        return _handle(store, request, options)
    except WasmtimeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failure here must never let the request through
        raise WasmtimeError(f"wasi:http egress policy failed: {exc!r}") from None


def define_http_filter(linker: Linker, version: str) -> None:
    """Shadow `wasi:http/outgoing-handler@<version>#handle` on a linker that has wasi:http."""
    linker.allow_shadowing = True
    with linker.root() as root:
        with root.add_instance(f"{OUTGOING_HANDLER}@{version}") as instance:
            add_func(instance, "handle", _guarded_handle)
