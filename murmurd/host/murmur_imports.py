"""The murmur interfaces the host provides, per role, as `HostInterface` tables.

Each function converts between wasmtime values and the plain values of `SessionContext`; the
behaviour itself lives on the session context.
"""

from __future__ import annotations

from typing import Any

from wasmtime.component import Variant

from murmurd.contract import ROLE_IMPORTS, Role, versioned
from murmurd.host.context import ArtifactInfo, ArtifactSummary, CallContext, ImportFailed
from murmurd.host import hook_legacy
from murmurd.host.hook_values import HANDLERS, inference_request_from_wasm, to_wasm
from murmurd.host.imports import HostInterface
from murmurd.host.values import (
    ToolResult,
    ToolStatus,
    make_record,
    tool_input_from_wasm,
    tool_result_to_wasm,
)
from murmurd.text import valid_text


def _emit_chunk(call: CallContext, chunk: str) -> None:
    if call.on_chunk is not None:
        call.on_chunk(chunk)


def _emit_thinking_chunk(call: CallContext, chunk: str) -> None:
    if call.on_thinking is not None:
        call.on_thinking(chunk)


def _request_input(call: CallContext, prompt: str) -> str:
    with call.guard.suspended():  # waiting for a human is not the guest's compute time
        answer = call.session.request_input(prompt)
    return valid_text(answer)  # a lone surrogate cannot reach the guest as UTF-8: U+FFFD, as elsewhere


def _run_imported_tool(call: CallContext, tool_input: Any) -> Any:
    """`murmur:tool/run#run` as an import: guests list it for its types; calling it is a mistake."""
    return tool_result_to_wasm(
        ToolResult(
            ToolStatus.ERROR,
            summary="murmur:tool/run#run is exported by tools; call a tool through murmur:tool-registry/invoke",
        )
    )


def _invoke(call: CallContext, name: str, tool_input: Any) -> Any:
    try:
        with call.guard.away():  # the tool's own call takes its own place
            result = call.session.invoke_tool(name, tool_input_from_wasm(tool_input))
        return tool_result_to_wasm(result)
    except ImportFailed as exc:
        return str(exc)


def _shell_run(call: CallContext, binary: str, args: list[str], env: list[tuple[str, str]]) -> Any:
    try:
        with call.guard.away():  # the command's run is the shell's, not guest code
            result = call.session.shell_run(binary, list(args), [tuple(pair) for pair in env], call.guard)
    except ImportFailed as exc:
        return str(exc)
    return make_record(
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        truncated=result.truncated,
        full_output_path=result.full_output_path,
    )


def _message_send(call: CallContext, peer_url: str, message: Any) -> Any:
    try:
        with call.guard.suspended():
            task = call.session.message_send(
                peer_url,
                getattr(message, "message-id"),
                getattr(message, "context-id"),
                message.text,
            )
    except ImportFailed as exc:
        return str(exc)
    return make_record(task_id=task.task_id, context_id=task.context_id, state=task.state)


def _summary(item: ArtifactSummary) -> Any:
    return make_record(name=item.name, version=item.version, runtime=item.runtime)


def _info(item: ArtifactInfo) -> Any:
    return make_record(
        name=item.name,
        version=item.version,
        description=item.description,
        tags=list(item.tags),
        runtime=item.runtime,
        input_schema=item.input_schema,
        output_schema=item.output_schema,
    )


def _err_on_failure(fn: Any) -> Any:
    """Wrap an implementation so `ImportFailed` becomes the WIT `err` arm."""

    def wrapper(call: CallContext, *args: Any) -> Any:
        try:
            return fn(call, *args)
        except ImportFailed as exc:
            return str(exc)

    return wrapper


def _list(call: CallContext) -> list[Any]:
    return [_summary(a) for a in call.session.artifacts_list()]


def _describe(call: CallContext, name: str) -> Any:
    return _info(call.session.artifact_describe(name))


def _search(call: CallContext, query: str) -> list[Any]:
    return [_summary(a) for a in call.session.artifact_search(query)]


def _pull(call: CallContext, name: str, version: str) -> Any:
    with call.guard.away():  # a registry fetch
        pulled = call.session.artifact_pull(name, version)
    return _summary(pulled)


def _remove(call: CallContext, name: str) -> bool:
    return call.session.artifact_remove(name)


def _diagnostics(call: CallContext) -> Any:
    state = call.session.diagnostics()
    return make_record(
        capsule_id=state.capsule_id,
        installed=[_summary(a) for a in state.installed],
        capabilities=state.capabilities,
    )


_MANAGE = {
    "list": _list,
    "describe": _err_on_failure(_describe),
    "search": _err_on_failure(_search),
    "pull": _err_on_failure(_pull),
    "remove": _err_on_failure(_remove),
    "diagnostics": _err_on_failure(_diagnostics),
}


def _run_inference(call: CallContext, request: Any) -> Any:
    with call.guard.suspended():  # waiting on the driver is not the hook's compute time
        response = call.session.run_inference(inference_request_from_wasm(request))
    return to_wasm(response)


def _task_input(call: CallContext) -> Variant:
    # `result<string, string>`: both arms are `str`, so wasmtime-py wants them tagged.
    try:
        return Variant("ok", call.session.task_input())
    except ImportFailed as exc:
        return Variant("err", str(exc))


def _task_result(call: CallContext) -> Variant:
    # `result<option<string>, string>`: `none` and `err` would be ambiguous untagged.
    try:
        return Variant("ok", call.session.task_result())
    except ImportFailed as exc:
        return Variant("err", str(exc))


def _history(call: CallContext) -> list[Any]:
    return [to_wasm(m) for m in call.session.conversation_history()]


def _count_tokens(call: CallContext, text: str) -> int:
    return call.session.count_tokens(text)


def _lifecycle_handler(name: str) -> Any:
    """`murmur:hook/lifecycle` is imported for its types (bindings generators list its handlers
    too); the host provides no handlers, and calling one answers `err`."""

    def handler(call: CallContext, _event: Any) -> str:
        return f"murmur:hook/lifecycle#{name} is exported by hooks, not provided by the host"

    return handler


# Unversioned interface -> functions.
_TABLE: dict[str, dict[str, Any]] = {
    "murmur:text/chunks": {"emit-chunk": _emit_chunk, "emit-thinking-chunk": _emit_thinking_chunk},
    "murmur:task/task": {"request-input": _request_input},
    "murmur:tool/run": {"run": _run_imported_tool},
    "murmur:tool-registry/invoke": {"invoke": _invoke},
    "murmur:shell/execute": {"run": _shell_run},
    "murmur:message/send": {"send": _message_send},
    "murmur:artifact-manager/manage": _MANAGE,
    "murmur:hook/lifecycle": {name: _lifecycle_handler(name) for name in HANDLERS},
    "murmur:runtime/tokens": {"count-tokens": _count_tokens},
    "murmur:runtime/inference": {"run-inference": _err_on_failure(_run_inference)},
    "murmur:task-io/read": {"task-input": _task_input, "task-result": _task_result},
    "murmur:conversation/read": {"history": _err_on_failure(_history)},
}


def _run_inference_v02(call: CallContext, request: Any) -> Any:
    with call.guard.suspended():
        response = call.session.run_inference(hook_legacy.inference_request_from_wasm(request))
    return to_wasm(response)  # inference-response has the same fields in both layouts


def legacy_hook_interfaces() -> list[HostInterface]:
    """What a `hook@0.5.0` component is linked against (`murmurd.host.hook_legacy`)."""
    return [
        HostInterface(hook_legacy.LIFECYCLE_EXPORT, {name: _lifecycle_handler(name) for name in HANDLERS}),
        HostInterface(f"{hook_legacy.INFERENCE}@{hook_legacy.VERSIONS[hook_legacy.INFERENCE]}",
                      {"run-inference": _err_on_failure(_run_inference_v02)}),
    ]


def interfaces_for(role: Role) -> list[HostInterface]:
    """Every murmur interface a component of `role` may import, ready for `imports.define`."""
    return [
        HostInterface(versioned(name), _TABLE[name])
        for name in sorted(ROLE_IMPORTS[role])
        if name in _TABLE
    ]
