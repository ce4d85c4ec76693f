"""murmur-driver-deepseek, bundled by name, through real sessions against a loopback stand-in
that speaks DeepSeek's chat completions SSE (`reasoning_content` deltas) or, ignoring `stream`,
answers one `application/json` completion, and, as DeepSeek does, refuses an assistant
tool-call turn sent back without its reasoning."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from driverkit_session import API_KEY, stage, usage_rows
from loopkit import capsule_dir, local
from conftest import EXAMPLES
from murmurd.session.events import TaskEvents
from murmurd.session.session import Session, TaskSpec
from standins import Status, Stream, serving

pytestmark = pytest.mark.anyio

DRIVER = "murmur-driver-deepseek"
MODEL = "deepseek-v4-flash"
ECHO = {"id": "call_0", "name": "echo", "input": {"text": "ping"}}


class Ordered(TaskEvents):
    """The task's stream as it arrived: ("thinking" | "text" | "tool", chunk) in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []

    def text_chunk(self, text: str) -> None:
        with self.lock:
            self.seen.append(("text", text))

    def thinking_chunk(self, text: str) -> None:
        with self.lock:
            self.seen.append(("thinking", text))

    def tool_chunk(self, text: str) -> None:
        with self.lock:
            self.seen.append(("tool", text))

    def kinds(self) -> list[str]:
        """The kinds with runs collapsed: ["thinking", "text", ...]."""
        out: list[str] = []
        for kind, _ in self.seen:
            if not out or out[-1] != kind:
                out.append(kind)
        return out

    def joined(self, kind: str) -> str:
        return "".join(t for k, t in self.seen if k == kind)


def deepseek_validate(body: dict[str, Any]) -> None:
    """What DeepSeek's API checks that matters here."""
    for key in ("model", "messages", "stream", "max_tokens", "thinking"):
        if key not in body:
            raise ValueError(f"missing field {key}")
    if body["thinking"].get("type") == "enabled":
        for message in body["messages"]:
            if message["role"] == "assistant" and message.get("tool_calls") and not message.get("reasoning_content"):
                raise ValueError("Missing `reasoning_content` field in the assistant message with tool_calls")


def ds_stream(*, reasoning: str = "", text: str = "", tool_calls: list[dict[str, Any]] = (),
              finish_reason: str = "stop", usage: dict[str, int] | None = None) -> Stream:
    """DeepSeek's chunk stream: reasoning deltas, content deltas, tool-call fragments, the
    finish, a usage chunk (with its cache-hit member), `[DONE]`."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return json.dumps({"id": "ds-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

    def halves(s: str) -> list[str]:
        cut = max(1, len(s) // 2)
        return [p for p in (s[:cut], s[cut:]) if p]

    wire = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    wire += [chunk({"reasoning_content": t, "content": None}) for t in halves(reasoning)] if reasoning else []
    wire += [chunk({"content": t, "reasoning_content": None}) for t in halves(text)] if text else []
    for index, call in enumerate(tool_calls):
        wire.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": call["name"], "arguments": ""}}]}))
        wire += [chunk({"tool_calls": [{"index": index, "function": {"arguments": t}}]})
                 for t in halves(json.dumps(call["input"]))]
    wire.append(chunk({"content": ""}, finish_reason))
    if usage is not None:
        wire.append(json.dumps({"id": "ds-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    wire.append("[DONE]")
    return Stream([(None, data) for data in wire])


def ds_completion(*, reasoning: str = "", text: str | None = None, tool_calls: list[dict[str, Any]] = (),
                  finish_reason: str | None = "stop", usage: dict[str, int] | None = None) -> dict[str, Any]:
    """DeepSeek's non-streamed answer (`chat.completion`), as it comes when `stream` is ignored."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["input"])}}
                                 for c in tool_calls]
    completion: dict[str, Any] = {"id": "ds-2", "object": "chat.completion", "created": 1, "model": MODEL,
                                  "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    if usage is not None:
        completion["usage"] = usage
    return completion


def usage(prompt: int, completion: int, hit: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit}


def deepseek_capsule(root: Path, endpoint: str, config: dict[str, Any], model: str = MODEL) -> Path:
    """The bundled driver named with no source (resolved by name, built through the cache)."""
    return capsule_dir(root, {
        "name": "deepseek-test", "version": "0.3.0",
        "artifacts": [{"name": DRIVER, "runtime": "driver"}, local("echo", "tool", EXAMPLES / "echo")],
        "inference": {"model": model, "endpoint": endpoint, "api_key": "${STANDIN_API_KEY}", "max_tokens": 2048,
                      "system_prompt": "You are a careful test agent.",
                      "driver": {"artifact": DRIVER, "config": config}},
        "capabilities": {"network": {"allow": [endpoint]}},
    })


async def run(staged, host, text: str) -> tuple[Any, Ordered]:
    session, events = Session(staged, host), Ordered()
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec(f"tsk_{0:032x}", text), events)
    finally:
        await session.close()
    return outcome, events


async def test_thinking_streams_before_text_and_the_reasoning_goes_back_with_the_tool_call(tmp_path: Path, host) -> None:
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [
            ds_stream(reasoning="The user wants an echo.", text="Calling echo.", tool_calls=[ECHO],
                      finish_reason="tool_calls", usage=usage(120, 30, 0)),
            ds_stream(reasoning="Echo answered ping.", text="All done: ping.", usage=usage(180, 9, 128)),
        ]
        staged = stage(deepseek_capsule(tmp_path, api.url, {}), host, tmp_path)
        assert staged.artifacts[DRIVER].resolved.origin.startswith("bundled:")
        outcome, events = await run(staged, host, "echo ping please")

    assert outcome.exit_status == "ok", outcome.error
    assert api.problems == []
    assert outcome.result_text == "All done: ping."
    # the stream: each turn's thinking, then its text, as the chunks arrived (the echo tool's own between)
    assert events.kinds() == ["thinking", "text", "tool", "thinking", "text"]
    assert events.joined("thinking") == "The user wants an echo.Echo answered ping."
    assert events.joined("text") == "Calling echo.All done: ping."

    first, second = api.requests
    assert first.path == "/chat/completions" and first.headers["authorization"] == f"Bearer {API_KEY}"
    body = first.body
    assert body["model"] == MODEL and body["stream"] is True and body["max_tokens"] == 2048
    assert body["thinking"] == {"type": "enabled"} and body["reasoning_effort"] == "high"
    assert body["stream_options"] == {"include_usage": True}
    system, user = body["messages"]
    assert system["role"] == "system" and "You are a careful test agent." in system["content"]
    assert user == {"role": "user", "content": "echo ping please"}
    (spec,) = body["tools"]
    assert spec["type"] == "function" and spec["function"]["name"] == "echo"

    assistant, tool = second.body["messages"][2:]
    assert assistant == {"role": "assistant", "content": None, "reasoning_content": "The user wants an echo.",
                         "tool_calls": [{"id": "call_0", "type": "function",
                                         "function": {"name": "echo", "arguments": '{"text": "ping"}'}}]}
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_0" and "ping" in tool["content"]
    # the answer kept a thinking block first; the tool-call turn's text was dropped, as upstream
    kept = [m for m in outcome.messages if m.role == "assistant"]
    assert [b["type"] for b in kept[0].content] == ["thinking", "tool_call"]
    assert [b["type"] for b in kept[1].content] == ["thinking", "text"]
    assert usage_rows(staged) == [{"input_tokens": 120, "output_tokens": 30, "cached_tokens": 0},
                                  {"input_tokens": 180, "output_tokens": 9, "cached_tokens": 128}]


async def test_thinking_disabled_and_length_is_max_tokens(tmp_path: Path, host) -> None:
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [ds_stream(text="cut sho", finish_reason="length")]
        staged = stage(deepseek_capsule(tmp_path, api.url, {"thinking": "disabled", "reasoning_effort": "max"}),
                       host, tmp_path)
        outcome, events = await run(staged, host, "write a lot")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "cut sho" and events.kinds() == ["text"]
    (seen,) = api.requests
    assert seen.body["thinking"] == {"type": "disabled"} and "reasoning_effort" not in seen.body


async def test_a_deprecated_or_unknown_model_fails_before_any_request(tmp_path: Path, host) -> None:
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [ds_stream(text="never")]
        staged = stage(deepseek_capsule(tmp_path / "a", api.url, {}, model="deepseek-reasoner"), host, tmp_path)
        deprecated, _ = await run(staged, host, "hello")
        staged = stage(deepseek_capsule(tmp_path / "b", api.url, {}, model="gpt-4o"), host, tmp_path)
        unknown, _ = await run(staged, host, "hello")
    assert api.requests == []
    assert deprecated.exit_status == "failed"
    assert "deepseek: model 'deepseek-reasoner' is deprecated (removal 2026-07-24)" in (deprecated.error or "")
    assert unknown.exit_status == "failed" and "model 'gpt-4o' is not supported" in (unknown.error or "")


async def test_an_unknown_finish_reason_and_bad_tool_arguments_fail_clearly(tmp_path: Path, host) -> None:
    bad_call = {"id": "call_0", "name": "echo", "input": {"text": "x"}}
    broken = ds_stream(tool_calls=[bad_call], finish_reason="tool_calls")
    # break the arguments: the last fragment loses its closing brace
    events = list(broken.events)
    for i, (name, data) in enumerate(events):
        if '"arguments": "x\\"}"' in data or data.endswith('x\\"}"}}]}, "finish_reason": null}]}'):
            events[i] = (name, data.replace('x\\"}', 'x\\"'))
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [ds_stream(text="", finish_reason="content_filter")]
        staged = stage(deepseek_capsule(tmp_path / "a", api.url, {}), host, tmp_path)
        filtered, _ = await run(staged, host, "something bad")
        api.replies, api.requests = [Stream(events)], []
        staged = stage(deepseek_capsule(tmp_path / "b", api.url, {}), host, tmp_path)
        garbled, _ = await run(staged, host, "call echo")
    assert filtered.exit_status == "failed" and "finish_reason 'content_filter'" in (filtered.error or "")
    assert garbled.exit_status == "failed" and "arguments for tool 'echo' are not JSON" in (garbled.error or "")


def test_a_real_daemon_streams_the_reasoning_then_the_answer(tmp_path: Path) -> None:
    """`murmurd serve` with the driver named by bundle: `message/stream` carries the thinking
    frames before the text frames, and the task completes with the answer."""
    import time

    from a2akit import serving as serving_daemon

    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [ds_stream(reasoning="Think first, then answer.", text="The answer is 4.",
                                 usage=usage(40, 12, 0))]
        capsule = deepseek_capsule(tmp_path, api.url, {})
        with serving_daemon(capsule, tmp_path / "state", env={"STANDIN_API_KEY": API_KEY}) as served:
            message = {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user",
                                   "parts": [{"text": "what is 2+2?"}]}}
            frames = served.events("message/stream", message, timeout=300)
    assert api.problems == [] and len(api.requests) == 1
    kinds = [event for _id, event, _data in frames]
    assert "thinking" in kinds and "text" in kinds, kinds
    assert kinds.index("thinking") < kinds.index("text")
    assert max(i for i, k in enumerate(kinds) if k == "thinking") < kinds.index("text")
    thought = "".join(d["text"] for _i, e, d in frames if e == "thinking")
    said = "".join(d["text"] for _i, e, d in frames if e == "text")
    assert thought == "Think first, then answer." and said.startswith("The answer is 4.")
    final = [d for _i, e, d in frames if e == "status" and d.get("final")]
    assert final and final[-1]["status"]["state"] == "completed", frames


def guest_modules(*names: str) -> list[Any]:
    """The driver's pure modules under CPython, from the directories it is built from."""
    bundled = Path(__file__).resolve().parent.parent / "murmurd" / "bundled"
    sys.path[:0] = [str(bundled / DRIVER), str(bundled / "_driverkit")]
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        del sys.path[:2]


def test_the_body_rules_params_strips_images_and_roles() -> None:
    """The request mapping itself (pure Python, the module the component is built from)."""
    chat, errors = guest_modules("deepseek_chat", "driverkit.errors")
    params = {"temperature": 0.3, "top_p": 0.9, "presence_penalty": 1, "frequency_penalty": 1, "seed": 7,
              "stream": False, "model": "ignored"}
    request = {"model": MODEL, "max_tokens": 64, "params": params, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image", "source": {"media_type": "image/png", "data": "AAAA"}}]}]}
    on = chat.build_body(request, MODEL, {"reasoning_effort": "max"}, {})
    assert on["thinking"] == {"type": "enabled"} and on["reasoning_effort"] == "max"
    assert on["stream"] is True and on["model"] == MODEL and on["seed"] == 7
    assert not {"temperature", "top_p", "presence_penalty", "frequency_penalty"} & set(on)
    assert on["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    off = chat.build_body(request, MODEL, {"thinking": "disabled", "reasoning_effort": 5}, {})
    assert off["thinking"] == {"type": "disabled"} and "reasoning_effort" not in off
    assert off["temperature"] == 0.3 and off["top_p"] == 0.9 and off["stream"] is True
    ignored = chat.build_body(request, MODEL, {"thinking": True}, {})  # only strings are read
    assert ignored["thinking"] == {"type": "enabled"} and ignored["reasoning_effort"] == "high"
    with pytest.raises(errors.ConfigError, match="no tool_call_id"):
        chat.build_body({"messages": [{"role": "tool", "content": []}]}, MODEL, {}, {})
    with pytest.raises(errors.ConfigError, match="unknown message role 'system'"):
        chat.build_body({"messages": [{"role": "system", "content": []}]}, MODEL, {}, {})


async def test_an_application_json_answer_is_read_whole_and_its_reasoning_goes_back(tmp_path: Path, host) -> None:
    """The non-streamed fallback: a stand-in that ignores `stream: true` and answers one
    `application/json` completion per turn. No chunk is emitted on that path (as upstream); the
    answer is the streamed one's: thinking first, the tool call, the reasoning sent back."""
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [
            Status(200, ds_completion(reasoning="The user wants an echo.", text="Calling echo.", tool_calls=[ECHO],
                                      finish_reason="tool_calls", usage=usage(120, 30, 0))),
            Status(200, ds_completion(reasoning="Echo answered ping.", text="All done: ping.",
                                      usage=usage(180, 9, 128))),
        ]
        staged = stage(deepseek_capsule(tmp_path, api.url, {}), host, tmp_path)
        outcome, events = await run(staged, host, "echo ping please")

    assert outcome.exit_status == "ok", outcome.error
    assert api.problems == []  # the second request carried the reasoning back, or the stand-in refused it
    assert outcome.result_text == "All done: ping."
    assert "text" not in events.kinds() and "thinking" not in events.kinds(), events.seen
    assistant = second_request_assistant(api)
    assert assistant["reasoning_content"] == "The user wants an echo."
    assert assistant["tool_calls"][0]["function"] == {"name": "echo", "arguments": '{"text": "ping"}'}
    kept = [m for m in outcome.messages if m.role == "assistant"]
    assert [b["type"] for b in kept[0].content] == ["thinking", "tool_call"]  # text dropped, as streamed
    assert kept[1].content == [{"type": "thinking", "text": "Echo answered ping."},
                               {"type": "text", "text": "All done: ping."}]
    assert usage_rows(staged) == [{"input_tokens": 120, "output_tokens": 30, "cached_tokens": 0},
                                  {"input_tokens": 180, "output_tokens": 9, "cached_tokens": 128}]


def second_request_assistant(api: Any) -> dict[str, Any]:
    _first, second = api.requests
    return second.body["messages"][2]


@pytest.mark.parametrize(("reply", "message"), [
    ({"id": "ds-3", "object": "chat.completion", "choices": []}, "deepseek: malformed answer: the response has no choices[0]"),
    ({"error": {"type": "invalid_request_error", "message": "model overloaded"}},
     "deepseek: response error invalid_request_error: model overloaded"),
    (ds_completion(text="filtered", finish_reason="content_filter"),
     "driver error: the model stopped with finish_reason 'content_filter'"),
    ("[1, 2]", "deepseek: malformed answer: the application/json body is not an object"),
    ('{"choices": [', "deepseek: malformed answer: the application/json body is not JSON"),
])
async def test_a_bad_application_json_answer_fails_naming_what_was_wrong(tmp_path: Path, host, reply: Any,
                                                                         message: str) -> None:
    with serving("/chat/completions", deepseek_validate) as api:
        api.replies = [Status(200, reply)]
        staged = stage(deepseek_capsule(tmp_path, api.url, {}), host, tmp_path)
        outcome, _ = await run(staged, host, "hello")
    assert len(api.requests) == 1  # a 2xx is never retried
    assert outcome.exit_status == "failed" and message in (outcome.error or ""), outcome.error


def test_a_whole_completion_and_its_stream_give_the_same_answer() -> None:
    """The two paths share one `response()`: the same turn, streamed or not, is the same answer."""
    chat, sse = guest_modules("deepseek_chat", "driverkit.sse")
    turn = {"reasoning": "Think.", "text": "Calling.", "tool_calls": [ECHO], "finish_reason": "tool_calls",
            "usage": usage(10, 5, 2)}
    seen: list[str] = []
    streamed = chat.assemble([sse.Event("message", data) for _name, data in ds_stream(**turn).events],
                             seen.append, seen.append)
    whole = chat.answer_whole(ds_completion(**turn))
    assert whole == streamed and seen  # the stream emitted its deltas; the whole answer emits none
    assert whole["content"][0] == {"type": "thinking", "text": "Think."}
    assert whole["content"][1] == {"type": "tool_call", "id": "call_0", "name": "echo", "input": {"text": "ping"}}
    assert whole["usage"] == {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 2}
