"""The process transport's pure rules and its per-session MCP server (issue 27): the argv each
CLI gets, the two stream dialects, and who may reach the capsule's tools."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from murmurd.session.driver_protocol import ToolSpec
from murmurd.session.process import command as cmd
from murmurd.session.process.claude_events import read_line
from murmurd.session.process.codex_events import CodexStream
from murmurd.session.process.mcp_server import BridgeServer
from murmurd.session.process.spawn import cli_environment
from murmurd.session.process.stream import Done, HostCommand, StreamFailed, Turn

pytestmark = pytest.mark.anyio

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_the_dialect_is_the_commands_stem() -> None:
    assert [cmd.dialect_of(c) for c in ("claude", "codex", "/usr/local/bin/codex", "CODEX", "codex.js", "x/claude")] \
        == ["claude", "codex", "codex", "codex", "codex", "claude"]


def test_claude_argv_offers_only_the_bridge_tools_and_no_empty_model() -> None:
    bridge = cmd.Bridge("http://127.0.0.1:1/bridge", "t" * 32)
    argv = cmd.claude_argv("/bin/claude", "", ["echo", "rm"], bridge, "SYS")
    assert "--model" not in argv
    assert argv[argv.index("--tools") + 1] == "mcp__claude_bridge__echo,mcp__claude_bridge__rm"
    config = json.loads(argv[argv.index("--mcp-config") + 1])
    assert config == {"mcpServers": {"claude_bridge": {"type": "http", "url": bridge.url,
                                                       "headers": {"Authorization": f"Bearer {'t' * 32}"}}}}
    assert argv[-2:] == ["--system-prompt", "SYS"] and "--strict-mcp-config" in argv
    bare = cmd.claude_argv("/bin/claude", "m", [], None, "SYS")
    assert bare[bare.index("--tools") + 1] == "" and bare[bare.index("--model") + 1] == "m"


def test_codex_argv_disables_host_tools_and_carries_the_prompt_last() -> None:
    bridge = cmd.Bridge("http://127.0.0.1:1/bridge", "tok")
    argv = cmd.codex_argv("/bin/codex", "gpt-x", bridge, cmd.system_text("Be brief."), "do it")
    assert argv[1:7] == ["exec", "--json", "--skip-git-repo-check", "-s", "read-only", "-c"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--disable"] == list(cmd.CODEX_DISABLED_FEATURES)
    assert 'mcp_servers.claude_bridge.http_headers.Authorization="Bearer tok"' in argv
    assert "mcp_servers.claude_bridge.tool_timeout_sec=600" in argv
    prompt = argv[-1]
    assert prompt.startswith(cmd.MURMUR_MD_TRUST_NOTICE) and "Be brief." in prompt
    assert prompt.endswith(f"{cmd.CODEX_TOOL_GUIDANCE}\n\ndo it")


def test_the_claude_stream_counts_non_thinking_assistant_events_and_fails_on_garbage() -> None:
    assert read_line('{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"x"}]}}') == []
    (turn,) = read_line('{"type":"assistant","message":{"content":[{"type":"tool_use","id":"a","name":"n"}]}}')
    assert isinstance(turn, Turn) and turn.decision == "tool_call" and turn.tool_name is None
    (text,) = read_line('{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}')
    assert text.decision == "end_turn" and text.text == "hi"
    assert read_line('{"type":"system","subtype":"init"}') == [] and read_line("   ") == []
    assert read_line('{"type":"result","subtype":"success","result":"done"}') == [Done("done")]
    with pytest.raises(StreamFailed, match="claude returned error: API Error: 500"):
        read_line('{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500"}')
    with pytest.raises(StreamFailed, match="claude returned error: error_max_budget"):
        read_line('{"type":"result","subtype":"error_max_budget"}')
    with pytest.raises(StreamFailed, match="malformed JSON on subprocess stdout"):
        read_line("Segmentation fault")


def test_the_codex_stream_keeps_the_last_message_and_skips_progress_text() -> None:
    stream = CodexStream()
    assert stream.read_line("Reading prompt from stdin...") == []
    assert stream.read_line('{"type":"item.completed","item":{"type":"error","message":"ignored setting"}}') == []
    (call,) = stream.read_line('{"type":"item.completed","item":{"type":"mcp_tool_call","tool":"echo"}}')
    assert isinstance(call, Turn) and call.tool_name == "echo" and call.decision == "tool_call"
    stream.read_line('{"type":"item.completed","item":{"type":"agent_message","text":"first"}}')
    stream.read_line('{"type":"item.completed","item":{"type":"agent_message","text":"last"}}')
    (ran,) = stream.read_line('{"type":"item.completed","item":{"type":"command_execution","command":"ls",'
                              '"exit_code":0,"aggregated_output":"a"}}')
    assert ran == HostCommand("ls", 0, "a")
    assert stream.read_line('{"type":"turn.completed","usage":{}}') == [Done("last")]
    with pytest.raises(StreamFailed, match="codex returned error: quota"):
        CodexStream().read_line('{"type":"turn.failed","error":{"message":"quota"}}')


def test_the_cli_environment_keeps_what_a_cli_reads_and_nothing_else(tmp_path) -> None:
    host = {"PATH": "/bin", "HOME": "/h", "ANTHROPIC_API_KEY": "k", "CODEX_HOME": "/c", "OPENAI_BASE_URL": "u",
            "GITHUB_TOKEN": "secret", "AWS_SECRET_ACCESS_KEY": "secret", "MURMURD_TOKEN": "secret", "EDITOR": "vi"}
    env = cli_environment(host, tmp_path)
    assert env == {"PATH": "/bin", "HOME": "/h", "ANTHROPIC_API_KEY": "k", "CODEX_HOME": "/c", "OPENAI_BASE_URL": "u",
                   "TMPDIR": str(tmp_path), "TMP": str(tmp_path), "TEMP": str(tmp_path)}


async def test_the_bridge_serves_the_capsule_tools_only_to_the_holder_of_its_token() -> None:
    calls: list[tuple[str, object]] = []

    async def dispatch(name: str, arguments: object) -> tuple[str, bool]:
        calls.append((name, arguments))
        return f"ran {name}", False

    tools = [ToolSpec("echo", "Echo it", {"type": "object", "properties": {"text": {"type": "string"}}})]
    async with BridgeServer(tools, dispatch) as bridge:
        assert bridge.url.startswith("http://127.0.0.1:") and bridge.url.endswith("/bridge")
        auth = {"authorization": f"Bearer {bridge.token}"}
        async with httpx.AsyncClient(timeout=30) as client:
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            assert (await client.post(bridge.url, json=listing, headers=MCP_HEADERS)).status_code == 401
            wrong = {"authorization": "Bearer " + "0" * 32}
            assert (await client.post(bridge.url, json=listing, headers={**MCP_HEADERS, **wrong})).status_code == 401
            assert (await client.get(bridge.url, headers=auth)).status_code == 405
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
            answer = await client.post(bridge.url, json=init, headers={**MCP_HEADERS, **auth})
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"]["serverInfo"]["name"] == "murmur-claude-bridge"
            listed = (await client.post(bridge.url, json=listing, headers={**MCP_HEADERS, **auth})).json()
            assert [(t["name"], t["inputSchema"]) for t in listed["result"]["tools"]] == [("echo", tools[0].parameters)]
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo",
                                                                                    "arguments": {"text": "x"}}}
            result = (await client.post(bridge.url, json=call, headers={**MCP_HEADERS, **auth})).json()["result"]
            assert result["content"] == [{"type": "text", "text": "ran echo"}] and result["isError"] is False
            other = {**call, "params": {"name": "rm", "arguments": {}}}
            refused = (await client.post(bridge.url, json=other, headers={**MCP_HEADERS, **auth})).json()["result"]
            assert refused["isError"] is True and "not one of this capsule's tools" in refused["content"][0]["text"]
    assert calls == [("echo", {"text": "x"})]


def test_the_cli_never_gets_a_home_that_holds_murmurd_s_own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A writable HOME holding the compile cache would let the agent plant native code the daemon loads.
    from murmurd.session.process.spawn import cli_home

    operator = tmp_path / "operator"
    (operator / ".cache" / "murmurd").mkdir(parents=True)
    workdir = tmp_path / "capsule" / "workdir" / "ses_1"
    workdir.mkdir(parents=True)
    monkeypatch.delenv("MURMUR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(operator))  # Path.home(): where the cache is by default
    assert cli_home({"HOME": str(operator)}, workdir) == str(workdir / ".capsule-home")
    monkeypatch.setenv("MURMUR_CACHE_DIR", str(tmp_path / "elsewhere"))  # cache moved out: the login is kept
    assert cli_home({"HOME": str(operator)}, workdir) == str(operator)
    (operator / ".murmur").mkdir()  # the stores and registry
    assert cli_home({"HOME": str(operator)}, workdir) == str(workdir / ".capsule-home")
    assert cli_home({"HOME": str(tmp_path)}, workdir) == str(workdir / ".capsule-home")  # it holds the workdir
    assert cli_home({}, workdir) == str(workdir / ".capsule-home")
