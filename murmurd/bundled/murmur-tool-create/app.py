"""murmur-tool-create: scaffold `tools/<name>/` (manifest, a stub that answers, README).

A tool (`runtime` native or wasm) or, as upstream accepts, a hook (`runtime: hook`): a Python
guest of world `hook` whose nine lifecycle handlers all answer `none`, every one the WIT
requires (upstream's Rust stub leaves out two, so it does not load).

Every path is relative to `.`, the filesystem scope the host preopens (the workdir). The name is
checked before anything is written (upstream leaves it unchecked and relies on the preopen), as
is the runtime (upstream writes the directory and manifest before refusing an unknown one).
A WASM tool cannot set file modes, so a native stub's `bin/run` is written without its execute
bit: the summary says to `chmod 755` it, and `murmurd build` refuses it until then.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from wit_world import exports
from wit_world.exports import run

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
RUNTIMES = ("native", "wasm", "hook")
# murmur:hook/lifecycle's handlers in WIT order, with the parameter and the event record each takes
HOOK_HANDLERS = (("on_stage", "event", "StageEvent"), ("on_session_start", "ctx", "SessionContext"),
                 ("on_task_start", "event", "TaskStartEvent"), ("on_inference", "event", "InferenceEvent"),
                 ("on_tool_call", "event", "ToolEvent"), ("on_shell", "event", "ShellEvent"),
                 ("on_compaction", "event", "CompactionEvent"), ("on_task_end", "event", "TaskEndEvent"),
                 ("on_session_end", "event", "SessionEndEvent"))


class Refused(Exception):
    """A request the tool answers with `error` and `scaffold failed: <message>`."""


def parse(data: str | None) -> dict[str, Any]:
    if data is None or not data.strip():
        raise Refused("no input provided on stdin")
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise Refused(f"input is not JSON: {exc}") from None
    if isinstance(request, dict) and isinstance(request.get("data"), str) and "name" not in request:
        try:
            request = json.loads(request["data"])  # the `{"data": "<json string>"}` envelope
        except ValueError as exc:
            raise Refused(f"data is not a JSON string: {exc}") from None
    if not isinstance(request, dict):
        raise Refused("input must be a JSON object")
    return request


def checked(request: dict[str, Any]) -> tuple[str, str]:
    kind = request.get("type", "tool")
    if kind != "tool":
        raise Refused(f"unknown scaffold type {kind!r} (only tool)")
    name = request.get("name")
    if not isinstance(name, str) or not name:
        raise Refused("name is required")
    if not NAME.fullmatch(name):
        raise Refused(f"name {name!r} must be lowercase letters, digits and - (at most 64, no / or ..)")
    runtime = request.get("runtime", "native")
    if runtime not in RUNTIMES:
        raise Refused(f"unknown runtime {runtime!r} (native, wasm or hook)")
    return name, runtime


def manifest(name: str, runtime: str) -> str:
    payload = "bin/run" if runtime == "native" else f"{name}.wasm"  # what `murmurd build` packs
    if runtime == "hook":
        return (
            f"name: {name}\n"
            "version: 0.1.0\n"
            "runtime: hook\n"
            f"description: TODO one sentence saying what {name} does at which lifecycle events\n"
            "# no binding: every event is dispatched; bind one handler (binding: on-task-end, say) and\n"
            "# name the arm it returns (commit_policy: reopen-task, ...) once it does more than observe\n"
            "execution_mode: blocking\n"
            "commit_policy: none\n"
            f"requires_files: [{payload}]\n"
        )
    return (
        f"name: {name}\n"
        "version: 0.1.0\n"
        "runtime: tool\n"
        f"implementation: {runtime}\n"
        f"description: TODO one sentence saying what {name} does (the model reads it in its tool list)\n"
        f"requires_files: [{payload}]\n"
        "input_schema:\n"
        "  type: object\n"
        "  properties: {}\n"
        "output_schema:\n"
        "  type: object\n"
    )


NATIVE_STUB = """#!/bin/sh
# {name}: a native murmur tool. stdin holds one JSON request {{"data": "<input JSON>", "log_path": ...}};
# print one JSON result on stdout and exit 0. Replace this stub with the real work.
cat > /dev/null
echo '{{"status": "passed", "summary": "{name}: stub (not implemented yet)", "data": null}}'
"""

WASM_STUB = '''"""{name}: a WASM murmur tool (compiled by `murmurd build` with componentize-py)."""

from __future__ import annotations

import json

from wit_world import exports
from wit_world.exports import run


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        request = json.loads(input.data or "{{}}")
        # TODO: do the work; files are relative to the workdir (the preopened ".")
        return run.ToolResult(run.Status.PASSED, "{name}: stub (not implemented yet)",
                              json.dumps({{"input": request}}), None, False, [])
'''

HOOK_STUB_HEAD = '''"""{name}: a murmur hook (compiled by `murmurd build` with componentize-py, world `hook`)."""

from __future__ import annotations

from wit_world import exports
from wit_world.imports import lifecycle

NONE = lifecycle.HookOutput_None_()


class Lifecycle(exports.Lifecycle):
    # The WIT requires every handler. Each answers `none` (nothing to commit) until it does the
    # work; murmur.yaml's `binding` and `commit_policy` say which event and which arm count.
'''


def hook_stub(name: str) -> str:
    handlers = (f"\n    def {handler}(self, {param}: lifecycle.{record}) -> lifecycle.HookOutput:\n        return NONE\n"
                for handler, param, record in HOOK_HANDLERS)
    return HOOK_STUB_HEAD.format(name=name) + "".join(handlers)


README = """# {name}

A murmur {kind} scaffolded by murmur-tool-create ({runtime}).

1. Say what it does in `murmur.yaml` (`description`){describe}.
2. Implement it in `{payload}`.
{steps}
4. Build it: `murmurd build tools/{name}`; name it in a capsule's `artifacts:`{entry}.

{result}
"""
TOOL_RESULT = """The result: `status` (`passed`, `failed` or `error`), a short `summary`, and `data` (text or
JSON) for the model."""
HOOK_RESULT = """Each handler returns a `HookOutput`: `none` says nothing; another arm (`seed-context`,
`reopen-task`, `artifact`, ...) is committed only at the handler `binding` names and only when
`commit_policy` names that arm. A hook holds no grant unless the capsule gives it one."""

NATIVE_STEPS = """   The process reads one JSON object on stdin, `{"data": "<the input as JSON text>",
   "log_path": "logs/tool-<name>.log"}`, and must print exactly one JSON object on stdout,
   `{"status": "passed", "summary": "...", "data": ...}`, then exit 0. It runs in the
   workdir under the capsule's shell containment.
3. Make it executable: `chmod 755 bin/run`."""

WASM_STEPS = """   `Run.run` receives the input as JSON text in `input.data` and returns a `ToolResult`.
   Files are opened relative to the workdir.
3. Keep it to the Python standard library (componentize-py bundles what it imports)."""

HOOK_STEPS = """   `Lifecycle` has one method per lifecycle event; change the ones the hook acts on and
   leave the others answering `NONE`, since the WIT requires all of them.
3. Keep it to the Python standard library (componentize-py bundles what it imports)."""


def scaffold(name: str, runtime: str) -> str:
    root = f"tools/{name}"
    if os.path.lexists(root):
        raise Refused(f"{root} already exists; remove it before scaffolding")
    os.makedirs(root)
    files = {"murmur.yaml": manifest(name, runtime)}
    if runtime == "native":
        files["bin/run"] = NATIVE_STUB.format(name=name)
        payload, steps = "bin/run", NATIVE_STEPS
    elif runtime == "hook":
        files["app.py"] = hook_stub(name)
        payload, steps = "app.py", HOOK_STEPS
    else:
        files["app.py"] = WASM_STUB.format(name=name)
        payload, steps = "app.py", WASM_STEPS
    hook = runtime == "hook"
    files["README.md"] = README.format(
        name=name, runtime=runtime, payload=payload, steps=steps, kind="hook" if hook else "tool",
        describe="" if hook else " and describe its input in `input_schema`\n   (a JSON Schema object: the model fills it in)",
        entry=" with `runtime: hook`" if hook else "", result=HOOK_RESULT if hook else TOOL_RESULT)
    for relative, text in files.items():
        path = f"{root}/{relative}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    return root


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        try:
            name, runtime = checked(parse(input.data))
            root = scaffold(name, runtime)
        except Refused as exc:
            return run.ToolResult(run.Status.ERROR, f"scaffold failed: {exc}", None, None, False, [])
        except OSError as exc:
            return run.ToolResult(run.Status.ERROR, f"scaffold failed: {exc.strerror or exc}", None, None, False, [])
        summary = f"Created {root}/"
        if runtime == "native":
            summary += f" (run `chmod 755 {root}/bin/run` before `murmurd build {root}`)"
        return run.ToolResult(run.Status.PASSED, summary, json.dumps({"path": root}), None, False, [])
