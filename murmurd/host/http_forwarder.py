"""The forwarder: a tiny component that lets Python read a `wasi:http` request and send it on.

wasmtime-py cannot call wasmtime's native `wasi:http` functions from Python, and cannot filter
them natively. A component can: this one imports wasmtime's own `wasi:http/types` and
`wasi:http/outgoing-handler` (through a linker where `handle` is the native one) and exports

- `target(borrow<outgoing-request>) -> tuple<option<scheme>, option<string>>`: the request's
  scheme and authority, exactly as wasmtime's client will read them;
- `forward(own<outgoing-request>, option<own<request-options>>) -> result<own<future-incoming-response>, error-code>`:
  the native `handle`, unchanged.

It is instantiated in the guest's own store, so the request the guest handed to the shadowed
`handle` is a resource of the same table, and the response future it gets back is the native
one. Its core code is a bump allocator (reset on every call: whatever the canonical ABI wrote
there has been lifted by the time the next call starts) and two functions that pass the
canonical ABI's return areas through untouched. It is text, compiled at first use per
`wasi:http` version, never downloaded.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from wasmtime import Engine
from wasmtime.component import Component, Func, Linker, ResourceAny, Variant

from murmurd.host.frozen_types import ExportShapes, FuncShape, invoke
from murmurd.host.prelinked import instantiate

_WAT = r'''
(component
  (import "wasi:http/types@VERSION" (instance $types
    (export "outgoing-request" (type $req (sub resource)))
    (export "request-options" (type $opts (sub resource)))
    (export "future-incoming-response" (type $fut (sub resource)))
    (type $scheme' (variant (case "HTTP") (case "HTTPS") (case "other" string)))
    (export "scheme" (type $scheme (eq $scheme')))
    (type $dns' (record (field "rcode" (option string)) (field "info-code" (option u16))))
    (export "DNS-error-payload" (type $dns (eq $dns')))
    (type $tls' (record (field "alert-id" (option u8)) (field "alert-message" (option string))))
    (export "TLS-alert-received-payload" (type $tls (eq $tls')))
    (type $fs' (record (field "field-name" (option string)) (field "field-size" (option u32))))
    (export "field-size-payload" (type $fs (eq $fs')))
    (type $ec' (variant
      (case "DNS-timeout")
      (case "DNS-error" $dns)
      (case "destination-not-found")
      (case "destination-unavailable")
      (case "destination-IP-prohibited")
      (case "destination-IP-unroutable")
      (case "connection-refused")
      (case "connection-terminated")
      (case "connection-timeout")
      (case "connection-read-timeout")
      (case "connection-write-timeout")
      (case "connection-limit-reached")
      (case "TLS-protocol-error")
      (case "TLS-certificate-error")
      (case "TLS-alert-received" $tls)
      (case "HTTP-request-denied")
      (case "HTTP-request-length-required")
      (case "HTTP-request-body-size" (option u64))
      (case "HTTP-request-method-invalid")
      (case "HTTP-request-URI-invalid")
      (case "HTTP-request-URI-too-long")
      (case "HTTP-request-header-section-size" (option u32))
      (case "HTTP-request-header-size" (option $fs))
      (case "HTTP-request-trailer-section-size" (option u32))
      (case "HTTP-request-trailer-size" $fs)
      (case "HTTP-response-incomplete")
      (case "HTTP-response-header-section-size" (option u32))
      (case "HTTP-response-header-size" $fs)
      (case "HTTP-response-body-size" (option u64))
      (case "HTTP-response-trailer-section-size" (option u32))
      (case "HTTP-response-trailer-size" $fs)
      (case "HTTP-response-transfer-coding" (option string))
      (case "HTTP-response-content-coding" (option string))
      (case "HTTP-response-timeout")
      (case "HTTP-upgrade-failed")
      (case "HTTP-protocol-error")
      (case "loop-detected")
      (case "configuration-error")
      (case "internal-error" (option string))))
    (export "error-code" (type $ec (eq $ec')))
    (export "[method]outgoing-request.scheme" (func (param "self" (borrow $req)) (result (option $scheme))))
    (export "[method]outgoing-request.authority" (func (param "self" (borrow $req)) (result (option string))))
  ))
  (alias export $types "outgoing-request" (type $req))
  (alias export $types "request-options" (type $opts))
  (alias export $types "future-incoming-response" (type $fut))
  (alias export $types "scheme" (type $scheme))
  (alias export $types "error-code" (type $ec))
  (import "wasi:http/outgoing-handler@VERSION" (instance $handler
    (export "outgoing-request" (type $req' (eq $req)))
    (export "request-options" (type $opts' (eq $opts)))
    (export "future-incoming-response" (type $fut' (eq $fut)))
    (export "error-code" (type $ec' (eq $ec)))
    (export "handle" (func (param "request" (own $req')) (param "options" (option (own $opts')))
                           (result (result (own $fut') (error $ec')))))
  ))

  (core module $Mem
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "reset") (global.set $heap (i32.const 1024)))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $ptr i32) (local $end i32)
      (local.set $ptr (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                               (i32.sub (i32.const 0) (local.get 2))))
      (local.set $end (i32.add (local.get $ptr) (local.get 3)))
      (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
        (then (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1))) (i32.const -1))
          (then unreachable))))
      (global.set $heap (local.get $end))
      (local.get $ptr))
  )
  (core instance $mem (instantiate $Mem))
  (alias core export $mem "memory" (core memory $memory))
  (alias core export $mem "realloc" (core func $realloc))

  (core func $scheme (canon lower (func $types "[method]outgoing-request.scheme") (memory $memory) (realloc $realloc)))
  (core func $authority (canon lower (func $types "[method]outgoing-request.authority") (memory $memory) (realloc $realloc)))
  (core func $handle (canon lower (func $handler "handle") (memory $memory) (realloc $realloc)))
  (core func $drop-borrow (canon resource.drop $req))

  (core module $Main
    (import "mem" "reset" (func $reset))
    (import "http" "scheme" (func $scheme (param i32 i32)))
    (import "http" "authority" (func $authority (param i32 i32)))
    (import "http" "handle" (func $handle (param i32 i32 i32 i32)))
    (import "http" "drop-borrow" (func $drop-borrow (param i32)))
    ;; 16..44: tuple<option<scheme>, option<string>>; 64..: result<own<fut>, error-code>
    (func (export "target") (param $req i32) (result i32)
      call $reset
      (call $scheme (local.get $req) (i32.const 16))
      (call $authority (local.get $req) (i32.const 32))
      (call $drop-borrow (local.get $req))
      (i32.const 16))
    (func (export "forward") (param $req i32) (param $has i32) (param $opts i32) (result i32)
      call $reset
      (call $handle (local.get $req) (local.get $has) (local.get $opts) (i32.const 64))
      (i32.const 64))
  )
  (core instance $main (instantiate $Main
    (with "mem" (instance $mem))
    (with "http" (instance (export "scheme" (func $scheme)) (export "authority" (func $authority)) (export "handle" (func $handle)) (export "drop-borrow" (func $drop-borrow))))))

  (type $target-result (tuple (option $scheme) (option string)))
  (func (export "target") (param "request" (borrow $req)) (result $target-result)
    (canon lift (core func $main "target") (memory $memory)))
  (func (export "forward") (param "request" (own $req)) (param "options" (option (own $opts)))
    (result (result (own $fut) (error $ec)))
    (canon lift (core func $main "forward") (memory $memory) (realloc $realloc)))
)
'''

_VERSION = re.compile(r"0\.2\.[0-9A-Za-z.+-]{1,40}")


def forwarder_wat(version: str) -> str:
    """The forwarder's text for `wasi:http@<version>` (the version the guest imports; it comes
    from a component's import names, so only a plain 0.2.x version reaches the text)."""
    if not _VERSION.fullmatch(version):
        raise ValueError(f"not a wasi:http 0.2.x version: {version!r}")
    return _WAT.replace("VERSION", version)


class ForwarderSource:
    """Compiles the forwarder once per `wasi:http` version, and the linker that instantiates it
    (WASI and wasmtime's native `wasi:http`, nothing shadowed). One per `ComponentHost`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._components: dict[str, Component] = {}
        self._linker: Linker | None = None
        self.shapes = ExportShapes()  # target's and forward's, per version
        self._lock = threading.Lock()

    def prepare(self, version: str) -> tuple[Linker, Component]:
        with self._lock:
            if self._linker is None:
                linker = Linker(self.engine)
                linker.add_wasip2()
                linker.add_wasi_http()
                self._linker = linker
            component = self._components.get(version)
            if component is None:
                component = self._components[version] = Component(self.engine, forwarder_wat(version))
            return self._linker, component


@dataclass
class Forwarder:
    """The forwarder instantiated in one store."""

    _target: Func
    _forward: Func
    _target_shape: FuncShape
    _forward_shape: FuncShape

    @classmethod
    def instantiate(cls, store: Any, source: ForwarderSource, version: str) -> Forwarder:
        linker, component = source.prepare(version)
        instance = instantiate(linker, store, component, "the wasi:http forwarder")
        target, forward = (instance.get_func(store, name) for name in ("target", "forward"))
        if target is None or forward is None:  # pragma: no cover - the text above exports both
            raise RuntimeError("the wasi:http forwarder does not export target and forward")
        return cls(target, forward, source.shapes.of((version, "target"), store, target),
                   source.shapes.of((version, "forward"), store, forward))

    def target(self, store: Any, request: ResourceAny) -> tuple[str | None, str | None]:
        """The request's scheme (`http`, `https`, or the other scheme's text) and authority."""
        scheme, authority = invoke(self._target, store, self._target_shape, request)
        self._target.post_return(store)
        if isinstance(scheme, Variant):
            scheme = {"HTTP": "http", "HTTPS": "https"}.get(scheme.tag, scheme.payload if scheme.tag == "other" else None)
        return scheme, authority

    def forward(self, store: Any, request: ResourceAny, options: ResourceAny | None) -> Any:
        """Send the request through wasmtime's native client; the guest gets what it answers."""
        result = invoke(self._forward, store, self._forward_shape, request, options)
        self._forward.post_return(store)
        return result
