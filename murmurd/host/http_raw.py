"""The shadowed `outgoing-handler#handle` at the C level: no wasmtime-py value conversion.

wasmtime-py converts every argument and result of a host function, and of each component call
it makes, between C and Python by walking the value's type afresh, and `result<_, error-code>`
walks `error-code`'s 39 cases several times over: a request paid about a millisecond of CPU in
those walks alone (issue 29). Here the request and its options are handed to the forwarder as
the C values wasmtime gave us, the forwarder's answer is written straight into our result, and
only the target's scheme and authority are read out of C (`target_of`). Anything unexpected in
those values raises, and the policy (`http_policy.py`) makes that a trap: never a request sent.
"""

from __future__ import annotations

import ctypes
from ctypes import byref
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime.component import Func

_Val = ffi.wasmtime_component_val_t
ValArray = Any  # ctypes POINTER(wasmtime_component_val_t): a host function's arguments or results
_SCHEMES = {"HTTP": "http", "HTTPS": "https"}


def _call(context: Any, func: Func, args: ValArray, count: int, result: Any) -> None:
    """Call `func` with `count` of `args` (borrowed: wasmtime copies them), answer into `result`."""
    error = ffi.wasmtime_component_func_call(byref(func._func), context, args, count, result, 1)
    if error:
        raise WasmtimeError._from_ptr(error)
    error = ffi.wasmtime_component_func_post_return(byref(func._func), context)
    if error:
        raise WasmtimeError._from_ptr(error)


def _option(val: Any) -> Any:
    if val.kind != ffi.WASMTIME_COMPONENT_OPTION.value:
        raise WasmtimeError("the forwarder's target is not an option")
    return val.of.option.contents if val.of.option else None


def _string(val: Any) -> str:
    if val.kind != ffi.WASMTIME_COMPONENT_STRING.value:
        raise WasmtimeError("the forwarder's target is not a string")
    return ffi.to_str(val.of.string)


def target_of(val: Any) -> tuple[str | None, str | None]:
    """The (scheme, authority) of the forwarder's `tuple<option<scheme>, option<string>>`."""
    if val.kind != ffi.WASMTIME_COMPONENT_TUPLE.value or val.of.tuple.size != 2:
        raise WasmtimeError("the forwarder's target is not a pair")
    scheme_val, authority_val = _option(val.of.tuple.data[0]), _option(val.of.tuple.data[1])
    scheme = None
    if scheme_val is not None:
        if scheme_val.kind != ffi.WASMTIME_COMPONENT_VARIANT.value:
            raise WasmtimeError("the forwarder's scheme is not a variant")
        tag = ffi.to_str(scheme_val.of.variant.discriminant)
        if tag in _SCHEMES:
            scheme = _SCHEMES[tag]
        elif tag == "other" and scheme_val.of.variant.val:
            scheme = _string(scheme_val.of.variant.val.contents)
        else:
            raise WasmtimeError(f"the forwarder's scheme has an unknown case {tag[:32]!r}")
    authority = _string(authority_val) if authority_val is not None else None
    return scheme, authority


def target(context: Any, func: Func, args: ValArray) -> tuple[str | None, str | None]:
    """The scheme and authority of the request in `args[0]`, read by the forwarder's `target`."""
    out = _Val()
    _call(context, func, args, 1, byref(out))
    try:
        return target_of(out)
    finally:
        ffi.wasmtime_component_val_delete(byref(out))


def forward(context: Any, func: Func, args: ValArray, results: ValArray) -> None:
    """The native `handle` of the request and options in `args`, its answer put in `results[0]`."""
    _call(context, func, args, 2, results)


def drop_request(context: Any, args: ValArray) -> None:
    """Drop the request and its options (a refused request is never sent; its resources go)."""
    resources = [args[0]]
    if args[1].kind == ffi.WASMTIME_COMPONENT_OPTION.value and args[1].of.option:
        resources.append(args[1].of.option.contents)
    for val in resources:
        if val.kind == ffi.WASMTIME_COMPONENT_RESOURCE.value and val.of.resource:
            error = ffi.wasmtime_component_resource_any_drop(context, val.of.resource)
            if error:
                raise WasmtimeError._from_ptr(error)


def answer_error(results: ValArray, code: str) -> None:
    """`results[0]` := `err(<code>)`, an `error-code` case without a payload."""
    case = _Val()
    case.kind = ffi.WASMTIME_COMPONENT_VARIANT
    case.of.variant.discriminant = ffi.str_to_capi(code)
    case.of.variant.val = ctypes.POINTER(_Val)()
    results[0].kind = ffi.WASMTIME_COMPONENT_RESULT
    results[0].of.result.is_ok = False
    results[0].of.result.val = ffi.wasmtime_component_val_new(byref(case))
