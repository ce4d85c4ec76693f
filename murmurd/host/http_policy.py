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

import ctypes
from dataclasses import replace
from typing import Any

from wasmtime import StoreContext, WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime.component import Linker
from wasmtime.component._enter import catch_exceptions

from murmurd.host.context import CallContext
from murmurd.host.egress import request_origin
from murmurd.host.http_egress import OUTGOING_HANDLER, EgressDenial
from murmurd.host.http_raw import ValArray, answer_error, drop_request
from murmurd.host.imports import call_context

DENIED = "HTTP-request-denied"
_SHOWN_AUTHORITY = 256  # characters of a refused authority kept in the trace
_SHOWN_SCHEME = 64
# Refusals traced per store (a call; a hook's session): a component looping on refused requests
# must not grow the trace without end. Every later request is still refused, untraced.
MAX_TRACED_DENIALS = 100
_NO_FINALIZER = ctypes.cast(None, ctypes.CFUNCTYPE(None, ctypes.c_void_p))  # `_guarded_handle` lives as long as the module

__all__ = ["DENIED", "MAX_TRACED_DENIALS", "define_http_filter"]


def _refuse(context: Any, call: CallContext, args: ValArray, results: ValArray, denial: EgressDenial) -> None:
    drop_request(context, args)
    egress = call.egress
    seen = egress.denials if egress is not None else 0
    if egress is not None:
        egress.denials += 1
    if seen < MAX_TRACED_DENIALS:
        call.session.egress_denied(denial)
    elif seen == MAX_TRACED_DENIALS:
        call.session.egress_denied(replace(denial, reason=f"{denial.reason}; {MAX_TRACED_DENIALS} refusals traced, "
                                           "no further refusals of this component are traced"))
    answer_error(results, DENIED)


def _handle(store: Any, context: Any, args: ValArray, results: ValArray) -> None:
    call = call_context(store)
    egress = call.egress
    interface = f"{OUTGOING_HANDLER}#handle"
    if egress is None or not egress.policy:
        return _refuse(context, call, args, results, EgressDenial(call.artifact, interface, "no network grant"))
    forwarder = egress.forwarder(store)
    scheme, authority = forwarder.target(context, args)
    origin = request_origin(scheme, authority)
    if not egress.policy.allows(origin):
        reason = ("not in capabilities.network.allow" if origin is not None
                  else "the request names no http(s) origin that can be checked")
        shown = authority[:_SHOWN_AUTHORITY] if authority is not None else None
        scheme = scheme[:_SHOWN_SCHEME] if scheme is not None else None
        denial = EgressDenial(call.artifact, interface, reason, str(origin) if origin else None, scheme, shown)
        return _refuse(context, call, args, results, denial)
    forwarder.forward(context, args, results)


@ffi.wasmtime_component_func_callback_t
def _guarded_handle(_data, context, _type, args, nargs, results, nresults):  # type: ignore[no-untyped-def]
    """`_handle` as wasmtime calls a host function (C values in and out, see `http_raw.py`), with
    any failure of the policy itself made a trap that names it."""
    def run(store: StoreContext) -> None:
        if nargs != 2 or nresults != 1:
            raise WasmtimeError(f"wasi:http handle called with {nargs} arguments and {nresults} results")
        try:
            _handle(store, context, args, results)
        except WasmtimeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failure here must never let the request through
            raise WasmtimeError(f"wasi:http egress policy failed: {exc!r}") from None
    return catch_exceptions(context, run)


def define_http_filter(linker: Linker, version: str) -> None:
    """Shadow `wasi:http/outgoing-handler@<version>#handle` on a linker that has wasi:http."""
    linker.allow_shadowing = True
    name = b"handle"
    with linker.root() as root:
        with root.add_instance(f"{OUTGOING_HANDLER}@{version}") as instance:
            error = ffi.wasmtime_component_linker_instance_add_func(
                instance.ptr(), ctypes.create_string_buffer(name), len(name), _guarded_handle, None, _NO_FINALIZER)
            if error:
                raise WasmtimeError._from_ptr(error)
