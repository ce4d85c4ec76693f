"""wasi:http without a network grant: the component loads, and every request is refused.

wasmtime's `wasi:http` is registered for its types, then `outgoing-handler#handle` is
shadowed, under the exact version the component imports, by a function that drops the
request and answers the WASI error code `HTTP-request-denied` before any connection is made.
"""

from __future__ import annotations

from typing import Any

from wasmtime.component import Linker, ResourceAny, Variant

OUTGOING_HANDLER = "wasi:http/outgoing-handler"
DENIED = "HTTP-request-denied"


def _deny(store: Any, request: Any, options: Any) -> Variant:
    for resource in (request, options):
        if isinstance(resource, ResourceAny):
            resource.drop(store)
    return Variant(DENIED)


def define_http_deny(linker: Linker, version: str) -> None:
    """Shadow `wasi:http/outgoing-handler@<version>#handle` on a linker that has wasi:http."""
    linker.allow_shadowing = True
    with linker.root() as root:
        with root.add_instance(f"{OUTGOING_HANDLER}@{version}") as instance:
            instance.add_func("handle", _deny)
