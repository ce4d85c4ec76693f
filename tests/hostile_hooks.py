"""Hook components written in WAT, assembled with `wasmtime.wat2wasm`, for host and runtime tests.

`hook_component(behaviour, missing=...)` exports `murmur:hook/lifecycle@0.8.0` with the exact
hook types, and lets a test choose what each handler does:

- `"none"` (the default): return `ok(none)`;
- `Err("text")`: return `err("text")`;
- `"trap"`: execute `unreachable`;
- `"spin"`: loop forever (only a deadline or a cancel ends it);
- `Arm("deny", "no rm")`, `Arm("replace-context", [HookMessage(...)])`,
  `Arm("write-manifests", [ToolManifest(...)])`: return `ok(<that arm>)`;
- `Grow(mib)`: grow linear memory by `mib` MiB, touch every page, then return `ok(none)`
  (the memory is resident until the store is closed).

`missing` leaves handlers out of the export (a component built from an edited WIT);
`also_export` exports the same instance under more names (an old-layout hook). Results are
static data: each handler's core function returns the address of its prebuilt
`result<hook-output, string>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from wasmtime import wat2wasm

from murmurd.host.hook_values import ARMS, HANDLERS, HookMessage, ToolManifest


@dataclass(frozen=True)
class Err:
    message: str


@dataclass(frozen=True)
class Arm:
    arm: str
    value: Any = None


@dataclass(frozen=True)
class Grow:
    mib: int


Behaviour = Union[str, Err, Arm, Grow]

# WIT types of the lifecycle interface, in declaration order, as small tuples.
S, U32, U64, S32, F64 = ("string",), ("u32",), ("u64",), ("s32",), ("f64",)


def _opt(t: tuple) -> tuple:
    return ("option", t)


def _list(t: tuple) -> tuple:
    return ("list", t)


def _ref(name: str) -> tuple:
    return ("ref", name)


TYPES: list[tuple[str, tuple]] = [
    ("message", ("record", [("role", S), ("content", S), ("id", S), ("source-id", _opt(S))])),
    ("tool-manifest", ("record", [("binary-name", S), ("content", S)])),
    ("hook-output", ("variant", [("none", None), ("replace-context", _list(_ref("message"))),
                                 ("write-manifests", _list(_ref("tool-manifest"))), ("artifact", S),
                                 ("reopen-task", S), ("seed-context", _list(_ref("message"))), ("deny", S)])),
    ("session-context", ("record", [("capsule-name", S), ("capsule-version", S), ("session-id", S),
                                    ("model", S), ("capabilities", _list(S))])),
    ("stage-event", ("record", [("shell-allow", _list(S))])),
    ("task-start-event", ("record", [("task-id", S), ("context-id", S), ("source", S), ("input-bytes", U64),
                                     ("context-window", U64), ("budget-tokens", U64), ("prior-tokens", U64)])),
    ("task-end-event", ("record", [("task-id", S), ("exit-status", S)])),
    ("inference-event", ("record", [("turn", U32), ("input-tokens", U64), ("output-tokens", U64),
                                    ("decision", S), ("tool-name", _opt(S)), ("prompt", _opt(S)),
                                    ("output", _opt(S)), ("tools", _opt(S))])),
    ("tool-outcome", ("record", [("output-bytes", U64), ("duration-ms", U64), ("status", S)])),
    ("tool-event", ("record", [("turn", U32), ("tool-name", S), ("input", S), ("input-bytes", U64),
                               ("outcome", _opt(_ref("tool-outcome")))])),
    ("shell-outcome", ("record", [("exit-code", S32), ("stdout", S), ("stderr", S), ("stdout-bytes", U64),
                                  ("stderr-bytes", U64), ("duration-ms", U64)])),
    ("shell-event", ("record", [("turn", U32), ("binary", S), ("command", S), ("argv", _list(S)),
                                ("script", _opt(S)), ("recipe", _opt(S)), ("outcome", _opt(_ref("shell-outcome")))])),
    ("compaction-event", ("record", [("messages", _list(_ref("message"))), ("session-tokens", U64),
                                     ("threshold", F64), ("model", _opt(S)), ("system-prompt", _opt(S))])),
    ("session-end-event", ("record", [("total-turns", U32), ("total-input-tokens", U64),
                                      ("total-output-tokens", U64), ("total-tool-calls", U32),
                                      ("total-shell-calls", U32), ("duration-ms", U64), ("exit-status", S)])),
]
_BY_NAME = dict(TYPES)
PARAMS: dict[str, tuple[str, str]] = {
    "on-stage": ("event", "stage-event"),
    "on-session-start": ("ctx", "session-context"),
    "on-task-start": ("event", "task-start-event"),
    "on-inference": ("event", "inference-event"),
    "on-tool-call": ("event", "tool-event"),
    "on-shell": ("event", "shell-event"),
    "on-compaction": ("event", "compaction-event"),
    "on-task-end": ("event", "task-end-event"),
    "on-session-end": ("event", "session-end-event"),
}
_PRIM = {"string": "string", "u32": "u32", "u64": "u64", "s32": "s32", "f64": "f64"}


def _wat_type(t: tuple, suffix: str) -> str:
    kind = t[0]
    if kind in _PRIM:
        return _PRIM[kind]
    if kind == "ref":
        return f"${t[1]}{suffix}"
    if kind == "list":
        return f"(list {_wat_type(t[1], suffix)})"
    if kind == "option":
        return f"(option {_wat_type(t[1], suffix)})"
    if kind == "record":
        return "(record " + " ".join(f'(field "{n}" {_wat_type(f, suffix)})' for n, f in t[1]) + ")"
    if kind == "variant":
        cases = [f'(case "{n}")' if c is None else f'(case "{n}" {_wat_type(c, suffix)})' for n, c in t[1]]
        return "(variant " + " ".join(cases) + ")"
    raise ValueError(kind)


def _flat(t: tuple) -> list[str]:
    """The canonical ABI's flattening of `t` into core value types."""
    kind = t[0]
    if kind in ("string", "list"):
        return ["i32", "i32"]
    if kind in ("u32", "s32"):
        return ["i32"]
    if kind == "u64":
        return ["i64"]
    if kind == "f64":
        return ["f64"]
    if kind == "ref":
        return _flat(_BY_NAME[t[1]])
    if kind == "record":
        return [core for _, f in t[1] for core in _flat(f)]
    if kind == "option":
        return ["i32", *_flat(t[1])]
    raise ValueError(kind)


def _core_params(handler: str) -> list[str]:
    flat = _flat(_ref(PARAMS[handler][1]))
    return ["i32"] if len(flat) > 16 else flat


class _Data:
    """Static memory built in Python: strings, records and each handler's result."""

    BASE = 1024

    def __init__(self) -> None:
        self.bytes = bytearray()

    def alloc(self, size: int, align: int = 4) -> int:
        while (self.BASE + len(self.bytes)) % align:
            self.bytes.append(0)
        addr = self.BASE + len(self.bytes)
        self.bytes.extend(b"\0" * size)
        return addr

    def put(self, addr: int, data: bytes) -> None:
        offset = addr - self.BASE
        self.bytes[offset : offset + len(data)] = data

    def u32(self, addr: int, value: int) -> None:
        self.put(addr, value.to_bytes(4, "little"))

    def string(self, text: str) -> tuple[int, int]:
        raw = text.encode()
        addr = self.alloc(max(len(raw), 1), 1)
        self.put(addr, raw)
        return addr, len(raw)

    def string_at(self, addr: int, text: str) -> None:
        ptr, length = self.string(text)
        self.u32(addr, ptr)
        self.u32(addr + 4, length)

    def messages(self, items: list[HookMessage]) -> tuple[int, int]:
        base = self.alloc(36 * len(items) or 1)
        for i, message in enumerate(items):
            at = base + 36 * i
            self.string_at(at, message.role)
            self.string_at(at + 8, message.content)
            self.string_at(at + 16, message.id)
            if message.source_id is not None:
                self.put(at + 24, b"\1")
                self.string_at(at + 28, message.source_id)
        return base, len(items)

    def manifests(self, items: list[ToolManifest]) -> tuple[int, int]:
        base = self.alloc(16 * len(items) or 1)
        for i, manifest in enumerate(items):
            self.string_at(base + 16 * i, manifest.binary_name)
            self.string_at(base + 16 * i + 8, manifest.content)
        return base, len(items)

    def result(self, behaviour: Behaviour) -> int:
        """A `result<hook-output, string>`: discriminant at 0, payload at 4 (hook-output's own
        discriminant at 4 and its payload at 8)."""
        at = self.alloc(16)
        if isinstance(behaviour, Err):
            self.put(at, b"\1")
            self.string_at(at + 4, behaviour.message)
            return at
        arm = behaviour if isinstance(behaviour, Arm) else Arm("none")
        self.put(at + 4, bytes([ARMS.index(arm.arm)]))
        if arm.arm in ("replace-context", "seed-context"):
            ptr, length = self.messages(list(arm.value))
        elif arm.arm == "write-manifests":
            ptr, length = self.manifests(list(arm.value))
        elif arm.arm != "none":
            ptr, length = self.string(str(arm.value))
        else:
            return at
        self.u32(at + 8, ptr)
        self.u32(at + 12, length)
        return at


SPIN = "(loop $l (br $l)) unreachable"


def _grow(mib: int) -> str:
    """Grow `mib` MiB (16 pages per MiB) and touch each 4 KiB page so it is resident."""
    return f"""(local $p i32) (local $end i32)
      (local.set $p (i32.mul (memory.grow (i32.const {16 * mib})) (i32.const 65536)))
      (if (i32.lt_s (local.get $p) (i32.const 0)) (then unreachable))
      (local.set $end (i32.add (local.get $p) (i32.const {mib * 1024 * 1024})))
      (loop $t
        (i32.store (local.get $p) (i32.const 1))
        (local.set $p (i32.add (local.get $p) (i32.const 4096)))
        (br_if $t (i32.lt_u (local.get $p) (local.get $end))))"""


def _body(behaviour: Behaviour, data: _Data) -> str:
    if behaviour == "trap":
        return "unreachable"
    if behaviour == "spin":
        return SPIN
    if isinstance(behaviour, Grow):
        return f"{_grow(behaviour.mib)}\n      i32.const {data.result('none')}"
    if behaviour != "none" and not isinstance(behaviour, (Err, Arm)):
        raise ValueError(f"unknown hook behaviour {behaviour!r}")
    return f"i32.const {data.result(behaviour)}"


def _escape(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


_REALLOC = """(global $bump (mut i32) (i32.const {heap}))
    (func (export "realloc") (param i32 i32) (param $align i32) (param $size i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.sub (local.get $align) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get $align))))
      (global.set $bump (i32.add (local.get $p) (local.get $size)))
      (if (i32.gt_u (global.get $bump) (i32.mul (memory.size) (i32.const 65536)))
        (then (drop (memory.grow (i32.add (i32.shr_u (i32.sub (global.get $bump)
                                                               (i32.mul (memory.size) (i32.const 65536)))
                                                      (i32.const 16))
                                          (i32.const 1))))))
      (local.get $p))"""


def hook_component(
    behaviour: Mapping[str, Behaviour] | None = None,
    *,
    missing: Iterable[str] = (),
    also_export: Iterable[str] = (),
    export: str = "murmur:hook/lifecycle@0.8.0",
) -> bytes:
    """A hook component; every handler not named in `behaviour` returns `ok(none)`."""
    chosen = dict(behaviour or {})
    unknown = set(chosen) - set(HANDLERS)
    if unknown:
        raise ValueError(f"no such handlers: {sorted(unknown)}")
    handlers = [h for h in HANDLERS if h not in set(missing)]
    data = _Data()
    core_funcs = []
    for handler in handlers:
        params = " ".join(_core_params(handler))
        core_funcs.append(
            f'(func (export "{handler}") (param {params}) (result i32)\n      {_body(chosen.get(handler, "none"), data)})'
        )
    heap = (data.BASE + len(data.bytes) + 4095) // 4096 * 4096
    pages = heap // 65536 + 2
    outer_types = "\n  ".join(f"(type ${name} {_wat_type(t, '')})" for name, t in TYPES)
    lifts = "\n  ".join(
        f'(func ${h} (param "{PARAMS[h][0]}" ${PARAMS[h][1]}) (result (result $hook-output (error string)))'
        f'\n    (canon lift (core func $i "{h}") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))'
        for h in handlers
    )
    # The shim imports each type (bound to the outer one), imports the lifted functions over those,
    # then re-exports the types by name and the functions over the exported types: an exported
    # function may only mention exported types, an imported one only imported types.
    shim_imports = "\n    ".join(
        f'(type ${name}-d {_wat_type(t, "-i")})\n    (import "import-type-{name}" (type ${name}-i (eq ${name}-d)))'
        for name, t in TYPES
    )
    shim_funcs = "\n    ".join(
        f'(import "f-{h}" (func $f-{h} (param "{PARAMS[h][0]}" ${PARAMS[h][1]}-i) '
        f'(result (result $hook-output-i (error string)))))'
        for h in handlers
    )
    shim_types = "\n    ".join(
        f'(type ${name}-x {_wat_type(t, "-e")})\n    (export ${name}-e "{name}" (type ${name}-x))' for name, t in TYPES
    )
    shim_exports = "\n    ".join(
        f'(export "{h}" (func $f-{h}) (func (param "{PARAMS[h][0]}" ${PARAMS[h][1]}-e) '
        f'(result (result $hook-output-e (error string)))))'
        for h in handlers
    )
    withs = " ".join(
        [f'(with "import-type-{name}" (type ${name}))' for name, _ in TYPES]
        + [f'(with "f-{h}" (func ${h}))' for h in handlers]
    )
    exports = "\n  ".join(f'(export "{name}" (instance $inst))' for name in [export, *also_export])
    text = f"""
(component
  (core module $m
    (memory (export "memory") {pages})
    (data (i32.const {data.BASE}) "{_escape(bytes(data.bytes))}")
    {_REALLOC.format(heap=heap)}
    {chr(10).join('    ' + f for f in core_funcs)}
  )
  (core instance $i (instantiate $m))
  {outer_types}
  {lifts}
  (component $shim
    {shim_imports}
    {shim_funcs}
    {shim_types}
    {shim_exports}
  )
  (instance $inst (instantiate $shim {withs}))
  {exports}
)
"""
    return wat2wasm(text)
