"""A shell child of a process-transport capsule looks for the MCP bridge's token: the CLI holds it
in its argv (`--mcp-config`), so the child reads every `/proc/*/cmdline` it can and prints what
looks like a bearer token, then tries the bridge's port range on host loopback. It finds
neither: the run's token never reaches a shell child."""

from __future__ import annotations

from pathlib import Path

import pytest

import clikit
from murmurd.host import ComponentHost
from test_process_transport import cli_setup, process_capsule, run_task

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(clikit.missing_reason() is not None,
                                                     reason=str(clikit.missing_reason()))]

# the markers are built at run time, so the script's own text (echoed in an error) never holds them
PROBE = ("echo PROBE-\"\"RAN; n=0; for f in /proc/[0-9]*/cmdline; do n=$((n+1)); "
         "tr '\\0' ' ' < \"$f\" 2>/dev/null | grep -o 'Beare[r] [0-9a-f]\\{32\\}' | sed 's/^/LEAK\"\"ED: /'; done; "
         "echo \"READ-\"\"$n\"")


async def test_a_shell_child_never_finds_the_bridge_token(tmp_path: Path, host: ComponentHost) -> None:
    with clikit.model_standin(clikit.ModelScript("sh", {"command": PROBE})) as script:
        env, command = cli_setup(tmp_path, script, "claude")
        capsule = process_capsule(tmp_path, command, capabilities={"shell": {"allow": ["sh", "tr", "grep", "sed"]}},
                                  provider=script.origin)
        _staged, outcome = await run_task(capsule, env, host, tmp_path / "wd")
    assert outcome.ok, (outcome.error, script.problems)
    print(outcome.result_text)
    assert "PROBE-RAN" in outcome.result_text, outcome.result_text  # the probe did run
    assert "LEAKED" not in outcome.result_text, outcome.result_text
