"""Tiny hostile components, written in WAT and assembled with `wasmtime.wat2wasm`.

Each exports `murmur:tool/run@0.1.0#run` with the exact tool types, so the host accepts it as
a tool and the hostility shows only when it runs (or in what it imports).
"""

from __future__ import annotations

from wasmtime import wat2wasm

_TOOL_TYPES = """
    (type $status (enum "passed" "failed" "error"))
    (type $input (record (field "data" (option string)) (field "log-path" (option string))))
    (type $result (record (field "status" $status) (field "summary" (option string)) (field "data" (option string))
                          (field "data-path" (option string)) (field "truncated" bool)
                          (field "metadata" (list (tuple string string)))))
"""

# The tool interface's shim: lifts `$run` into the exported `murmur:tool/run` instance (`{export}`
# follows it in each template). Shared by every WAT tool the tests build.
TOOL_SHIM = """  (component $shim
    (type $status' (enum "passed" "failed" "error"))
    (import "import-type-status" (type $status (eq $status')))
    (type $input' (record (field "data" (option string)) (field "log-path" (option string))))
    (import "import-type-tool-input" (type $input (eq $input')))
    (type $result' (record (field "status" $status) (field "summary" (option string)) (field "data" (option string))
                        (field "data-path" (option string)) (field "truncated" bool)
                        (field "metadata" (list (tuple string string)))))
    (import "import-type-tool-result" (type $result (eq $result')))
    (import "import-func-run" (func $f (param "input" $input) (result $result)))
    (type $status2 (enum "passed" "failed" "error"))
    (export $es "status" (type $status2))
    (type $input2 (record (field "data" (option string)) (field "log-path" (option string))))
    (export $ei "tool-input" (type $input2))
    (type $result2 (record (field "status" $es) (field "summary" (option string)) (field "data" (option string))
                        (field "data-path" (option string)) (field "truncated" bool)
                        (field "metadata" (list (tuple string string)))))
    (export $er "tool-result" (type $result2))
    (export "run" (func $f) (func (param "input" $ei) (result $er)))
  )
  (instance $inst (instantiate $shim
    (with "import-type-status" (type $status))
    (with "import-type-tool-input" (type $input))
    (with "import-type-tool-result" (type $result))
    (with "import-func-run" (func $run))))
"""

_TEMPLATE = """
(component
  {imports}
  (core module $m
    (memory (export "memory") {min_pages})
    (func (export "run") (param i32 i32 i32 i32 i32 i32) (result i32)
      {body})
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024)
  )
  (core instance $i (instantiate $m))
  {outer_types}
  (func $run (param "input" $input) (result $result)
    (canon lift (core func $i "run") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
{shim}  (export "{export}" (instance $inst))
)
"""

SPIN = "(loop $l (br $l)) unreachable"
# Grow linear memory 16 MiB at a time until refused, then trap the way a failed allocation does.
GROW = """(loop $l
        (if (i32.eq (memory.grow (i32.const 256)) (i32.const -1)) (then unreachable))
        (br $l))
      unreachable"""


def tool_component(
    body: str = SPIN,
    *,
    imports: str = "",
    min_pages: int = 1,
    export: str = "murmur:tool/run@0.1.0",
) -> bytes:
    """A component exporting a tool `run` whose core body is `body`."""
    text = _TEMPLATE.format(
        shim=TOOL_SHIM,
        imports=imports,
        min_pages=min_pages,
        body=body,
        outer_types=_TOOL_TYPES,
        export=export,
    )
    return wat2wasm(text)

# Grow linear memory 16 MiB at a time and touch every page, so the memory is really resident,
# until a grow is refused; then trap.
BALLOON = """(local $p i32) (local $end i32)
      (loop $l
        (local.set $p (i32.mul (memory.grow (i32.const 256)) (i32.const 65536)))
        (if (i32.lt_s (local.get $p) (i32.const 0)) (then unreachable))
        (local.set $end (i32.add (local.get $p) (i32.const 16777216)))
        (loop $t
          (i32.store (local.get $p) (i32.const 1))
          (local.set $p (i32.add (local.get $p) (i32.const 4096)))
          (br_if $t (i32.lt_u (local.get $p) (local.get $end))))
        (br $l))
      unreachable"""
