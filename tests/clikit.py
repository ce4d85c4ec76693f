"""The real CLI agents (Claude Code, codex) against loopback stand-ins of their providers.

`.ci/run` installs both npm packages into `.ci/clis` when missing, at the versions that run on
Debian's Node 20 (process-transport.md §10). `claude_binary()` / `codex_binary()` are their
native executables (fact sheet §11: the npm codex bin is a node wrapper that on Node 20 outlives
a SIGKILL of itself; `codex_wrapper()` is that wrapper, for the test that murmurd still leaves
nothing behind).

`ModelScript` is the model: a loopback HTTP server speaking the Anthropic Messages SSE stream
(`POST /v1/messages`) and the OpenAI Responses stream (`POST /v1/responses`). Its policy:
a request whose conversation holds no tool result yet calls the scripted tool; one that holds
a result answers `ANSWER_PREFIX + <the result text>`; with `always_call` it calls the tool on
every request (a model that never stops).
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLIS = ROOT / ".ci" / "clis" / "node_modules"
CLAUDE_VERSION = "2.1.197"
CODEX_VERSION = "0.171.0"
ANSWER_PREFIX = "The tool answered: "
CODEX_MODEL = "gpt-standin"  # uncatalogued: codex offers MCP tools as a namespace (§10)


def claude_binary() -> Path:
    return CLIS / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"


def codex_binary() -> Path:
    return CLIS / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl" / "bin" / "codex"


def codex_wrapper() -> Path:
    return CLIS / "@openai" / "codex" / "bin" / "codex.js"


def missing_reason() -> str | None:
    for path in (claude_binary(), codex_binary(), codex_wrapper()):
        if not path.exists():
            return f"{path} is missing: .ci/run installs the CLIs (npm) when missing"
    return None


def linked_bin(directory: Path, name: str, target: Path) -> Path:
    """`<directory>/<name>` -> target: the command a manifest names, on the PATH handed to murmurd."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / name
    if not link.exists():
        link.symlink_to(target)
    return link


@dataclass
class ModelScript:
    tool: str  # the bare tool name the model calls
    arguments: dict[str, Any]
    always_call: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def model_calls(self, path: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r["path"].startswith(path) and r["body"].get("tools"))

    # -- Anthropic Messages ------------------------------------------------------------------

    def anthropic(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        tools = [t.get("name", "") for t in body.get("tools") or []]
        wanted = next((t for t in tools if t.endswith(f"__{self.tool}")), None)
        result = _anthropic_tool_result(body.get("messages") or [])
        start = {"type": "message_start", "message": {
            "id": "msg_standin", "type": "message", "role": "assistant", "content": [], "model": body.get("model", ""),
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}
        if wanted is not None and (result is None or self.always_call):
            n = len(self.requests)
            blocks = [("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                          "type": "tool_use", "id": f"toolu_{n:04d}", "name": wanted, "input": {}}}),
                      ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                          "type": "input_json_delta", "partial_json": json.dumps(self.arguments)}}),
                      ("content_block_stop", {"type": "content_block_stop", "index": 0})]
            stop = "tool_use"
        else:
            text = ANSWER_PREFIX + (result or "(no tool)")
            blocks = [("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}),
                      ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": text}}),
                      ("content_block_stop", {"type": "content_block_stop", "index": 0})]
            stop = "end_turn"
        end = [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
        return [("message_start", start), *blocks, *end]

    # -- OpenAI Responses --------------------------------------------------------------------

    def responses(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        call = _responses_tool(body.get("tools") or [], self.tool)
        result = _responses_tool_result(body.get("input") or [])
        n = len(self.requests)
        if call is not None and (result is None or self.always_call):
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
                                    "name": call[1], "arguments": json.dumps(self.arguments), "status": "completed"}
            if call[0] is not None:
                item["namespace"] = call[0]
        else:
            item = {"type": "message", "id": f"msg_{n:04d}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "annotations": [],
                                 "text": ANSWER_PREFIX + (result or "(no tool)")}]}
        response = {"id": f"resp_{n:04d}", "object": "response", "created_at": 0, "model": body.get("model", ""),
                    "status": "in_progress", "output": []}
        done = {**response, "status": "completed", "output": [item],
                "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}
        return [("response.created", {"type": "response.created", "response": response}),
                ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                "item": item}),
                ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
                ("response.completed", {"type": "response.completed", "response": done})]


def _anthropic_tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The text of the latest tool_result block in the conversation, if any."""
    for message in reversed(messages):
        content = message.get("content")
        for block in reversed(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    return inner
                return "".join(b.get("text", "") for b in inner or [] if isinstance(b, dict))
    return None


def _responses_tool(tools: list[dict[str, Any]], bare: str) -> tuple[str | None, str] | None:
    """(namespace, name) of the offered tool ending in `bare` (codex nests MCP tools in a namespace)."""
    for tool in tools:
        if tool.get("type") == "namespace":
            for member in tool.get("tools") or []:
                if str(member.get("name", "")).endswith(bare):
                    return tool.get("name"), member["name"]
        elif str(tool.get("name", "")).endswith(bare):
            return None, tool["name"]
    return None


def _responses_tool_result(items: list[dict[str, Any]]) -> str | None:
    for item in reversed(items):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, str):
                return output
            return "".join(b.get("text", "") for b in output or [] if isinstance(b, dict))
    return None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: ModelScript

    def log_message(self, *_: Any) -> None:
        return None

    def do_HEAD(self) -> None:  # noqa: N802 - Claude Code's reachability check
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "not JSON"}})
            return
        path = self.path.split("?")[0]
        with self.script.lock:
            self.script.requests.append({"path": path, "body": body})
        if path == "/v1/messages":
            if not body.get("stream"):
                self._json(200, {"id": "msg_side", "type": "message", "role": "assistant", "model": body.get("model"),
                                 "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                                 "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}})
                return
            self._sse(self.script.anthropic(body))
        elif path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": 10})
        elif path == "/v1/responses":
            self._sse(self.script.responses(body))
        else:
            with self.script.lock:
                self.script.problems.append(f"unexpected POST {self.path}")
            self._json(404, {"error": {"message": f"no route {path}"}})

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


@contextmanager
def model_standin(script: ModelScript) -> Iterator[ModelScript]:
    handler = type("Handler", (_Handler,), {"script": script})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    script.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()


def cli_env(home: Path, script: ModelScript, bin_dir: Path) -> dict[str, str]:
    """A fresh HOME holding both CLIs' configuration, and the environment murmurd runs with
    (fact sheet §11): the provider is the stand-in, nothing non-essential leaves, root may bypass
    permissions (IS_SANDBOX)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model_provider = "standin"\n\n[model_providers.standin]\nname = "loopback stand-in"\n'
        f'base_url = "{script.origin}/v1"\nwire_api = "responses"\nrequest_max_retries = 0\n'
        f'stream_max_retries = 0\n')
    env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "MURMUR_CACHE_DIR",
                                                          "XDG_CACHE_HOME")}
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "ANTHROPIC_BASE_URL": script.origin,
        "ANTHROPIC_API_KEY": "sk-standin",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        "IS_SANDBOX": "1",
        "UNRELATED_SECRET_TOKEN": "must-not-reach-the-cli",
    })
    if "MURMUR_CACHE_DIR" not in env:
        env["MURMUR_CACHE_DIR"] = str(Path.home() / ".cache" / "murmurd")
    return env
