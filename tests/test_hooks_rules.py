"""The pure parts of the hooks runtime: the commit table, recipe bodies, tool-manifest checks,
and the async queue's order, overflow and drain (real asyncio, plain coroutines)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from murmurd.hooks.commit import Committed, Dispatch, Fault, judge
from murmurd.hooks.manifests import ManifestRefused, check_tool_manifest
from murmurd.hooks.queue import HookQueue, drain_all
from murmurd.hooks.recipes import RecipeRequest, just_recipe, make_recipe, npm_recipe, read_recipe, recipe_request
from murmurd.manifest.hooks import COMMITTED_ARM

ARMS = ["replace-context", "write-manifests", "artifact", "reopen-task", "seed-context", "deny"]


# -- the commit table -------------------------------------------------------------------------

@pytest.mark.parametrize("handler", list(COMMITTED_ARM))
@pytest.mark.parametrize("arm", ARMS)
def test_each_handler_commits_its_one_arm_and_faults_every_other(handler: str, arm: str) -> None:
    dispatch = Dispatch.DECISION if handler in ("on-shell", "on-tool-call") else Dispatch.ONCE
    value = '{"a": 1}' if arm == "artifact" else "v"
    verdict = judge(handler, dispatch, arm, value)
    if COMMITTED_ARM[handler] == arm:
        assert isinstance(verdict, Committed) and verdict.arm == arm
    else:
        assert isinstance(verdict, Fault) and verdict.arm == arm


@pytest.mark.parametrize("handler", list(COMMITTED_ARM))
def test_none_is_always_silent(handler: str) -> None:
    assert judge(handler, Dispatch.ONCE, "none") is None
    assert judge(handler, Dispatch.ONCE, "none", asynchronous=True) is None


def test_deny_is_honoured_at_the_decision_point_only() -> None:
    assert judge("on-shell", Dispatch.DECISION, "deny", "no") == Committed("deny", "no")
    fault = judge("on-shell", Dispatch.OBSERVATION, "deny", "no")
    assert isinstance(fault, Fault) and "already ran" in fault.reason


@pytest.mark.parametrize("arm", ARMS)
def test_an_async_hook_commits_nothing(arm: str) -> None:
    verdict = judge("on-inference", Dispatch.ONCE, arm, '{"a": 1}', asynchronous=True)
    assert isinstance(verdict, Fault) and "async" in verdict.reason


@pytest.mark.parametrize("value", ["nope", "[1]", "1", "null", None])
def test_an_artifact_must_be_a_json_object(value: object) -> None:
    assert isinstance(judge("on-inference", Dispatch.ONCE, "artifact", value), Fault)
    assert judge("on-inference", Dispatch.ONCE, "artifact", '{"k": [1]}') == Committed("artifact", {"k": [1]})


# -- recipes ------------------------------------------------------------------------------------

MAKEFILE = """\
CC = cc
.PHONY: all build
all: build

build: main.o ; @echo inline
\t$(CC) -o app main.o
\t# a comment line in the recipe

\tstrip app
test:
\t./app --test
"""


def test_make_reads_the_named_target_or_the_default_goal() -> None:
    assert make_recipe(MAKEFILE, "build") == "@echo inline\n$(CC) -o app main.o\n# a comment line in the recipe\nstrip app"
    assert make_recipe(MAKEFILE, "test") == "./app --test"
    assert make_recipe(MAKEFILE, None) == ""  # `all` has no recipe lines of its own
    assert make_recipe(MAKEFILE, "missing") is None


JUSTFILE = """\
set shell := ["bash", "-c"]
alias b := build

# build it
build target="app":
    cc -o {{target}} main.c
    strip {{target}}

@test: build
  ./app --test
"""


def test_just_reads_the_recipes_indented_body() -> None:
    assert just_recipe(JUSTFILE, "build") == "cc -o {{target}} main.c\nstrip {{target}}"
    assert just_recipe(JUSTFILE, "test") == "./app --test"
    assert just_recipe(JUSTFILE, None) == just_recipe(JUSTFILE, "build")
    assert just_recipe(JUSTFILE, "nope") is None


def test_npm_reads_the_scripts_entry() -> None:
    package = '{"scripts": {"build": "tsc -p .", "n": 3}}'
    assert npm_recipe(package, "build") == "tsc -p ."
    assert npm_recipe(package, "n") is None and npm_recipe("not json", "build") is None


@pytest.mark.parametrize("argv, expected", [
    (["make", "build"], RecipeRequest("make", "build")),
    (["make", "-j", "4", "CC=gcc", "test"], RecipeRequest("make", "test")),
    (["make", "-C", "sub", "all"], RecipeRequest("make", "all", "sub")),
    (["make"], RecipeRequest("make", None)),
    (["just", "--set", "x", "y", "build"], RecipeRequest("just", "build")),
    (["npm", "run", "build"], RecipeRequest("npm", "build")),
    (["npm", "run-script", "lint"], RecipeRequest("npm", "lint")),
    (["npm", "install"], None),
    (["npm", "run"], None),
    (["sh", "-c", "make build"], None),
    ([], None),
])
def test_which_recipe_a_call_names(argv: list[str], expected: RecipeRequest | None) -> None:
    assert recipe_request(argv[0] if argv else "make", argv) == expected


def test_recipes_are_read_from_the_workdir_without_following_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "makefile").write_text("build:\n\tfrom makefile\n")
    (tmp_path / "Makefile").write_text("build:\n\tfrom Makefile\n")
    assert read_recipe(tmp_path, RecipeRequest("make", "build")) == "from makefile"  # GNU make's order
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "GNUmakefile").write_text("build:\n\tin sub\n")
    assert read_recipe(tmp_path, RecipeRequest("make", "build", "sub")) == "in sub"
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("build:\n\tsecret\n")
    (tmp_path / "justfile").symlink_to(outside)
    assert read_recipe(tmp_path, RecipeRequest("just", "build")) is None
    assert read_recipe(tmp_path, RecipeRequest("make", "build", "../" + tmp_path.name)) is None
    assert read_recipe(tmp_path, RecipeRequest("npm", "build")) is None


# -- tool manifests ----------------------------------------------------------------------------

def test_a_tool_manifest_is_checked_before_it_is_written() -> None:
    checked = check_tool_manifest("git", "description: \"Version control\\u0007\"\nversion: '2'\n", ["git"])
    assert (checked.binary, checked.description, checked.version) == ("git", "Version control", "2")
    for content, rule in [("x" * 70000, "over"), ("description: 3\n", "must be a string"),
                          ("version: 3\n", "must be a string"), ("a: *b\n", "not valid YAML")]:
        with pytest.raises(ManifestRefused, match=rule):
            check_tool_manifest("git", content, ["git"])
    with pytest.raises(ManifestRefused, match="not in capabilities.shell.allow"):
        check_tool_manifest("../evil", "{}", ["git"])


def test_upstreams_native_tool_spelling_describes_a_binary_and_nothing_else_does() -> None:
    upstream = "name: git\nruntime: tool\nimplementation: native\ndescription: Git.\ninput: {type: object}\n"
    assert check_tool_manifest("git", upstream, ["git"]).description == "Git."
    for content in ["runtime: tool\n", "runtime: tool\nimplementation: wasm\n", "runtime: hook\n",
                    "runtime: native\n"]:
        with pytest.raises(ManifestRefused, match="not 'shell' or 'tool' with implementation 'native'"):
            check_tool_manifest("git", content, ["git"])


# -- the async queue -----------------------------------------------------------------------------

async def _queue(overflow: str, bound: int, delay: float) -> tuple[HookQueue, list[str], list[tuple[str, str, str]]]:
    delivered: list[str] = []
    faults: list[tuple[str, str, str]] = []
    running = 0

    async def deliver(handler: str, event: object) -> None:
        nonlocal running
        running += 1
        assert running == 1, "a hook never runs concurrently with itself"
        await asyncio.sleep(delay)
        delivered.append(str(event))
        running -= 1

    queue = HookQueue("q", deliver, lambda e, a, d: faults.append((e, a, d)), overflow=overflow, bound=bound)
    return queue, delivered, faults


@pytest.mark.anyio
async def test_the_queue_keeps_order_and_drops_what_overflows() -> None:
    queue, delivered, faults = await _queue("drop", 2, 0.05)
    for i in range(6):
        await queue.put("on-inference", i)
    assert await queue.drain(5) is True
    assert delivered == ["0", "1"] and queue.dropped == 4  # the worker had not run yet: two fit
    assert [f[:2] for f in faults] == [("on-inference", "queue-overflow")] * 4


@pytest.mark.anyio
async def test_the_queue_blocks_the_producer_under_block() -> None:
    queue, delivered, faults = await _queue("block", 1, 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(5):
        await queue.put("on-inference", i)
    assert loop.time() - started >= 0.15  # the producer waited for room
    await drain_all([queue], 5)
    assert delivered == [str(i) for i in range(5)] and faults == [] and queue.dropped == 0


@pytest.mark.anyio
async def test_a_drain_past_its_budget_abandons_the_running_call() -> None:
    queue, delivered, faults = await _queue("drop", 4, 10)
    await queue.put("on-session-end", "slow")
    await queue.put("on-session-end", "never")
    assert await queue.drain(0.2) is False
    assert delivered == [] and faults == [("drain", "timeout", faults[0][2])]
    assert "1 queued event(s) undelivered" in faults[0][2]


@pytest.mark.anyio
async def test_a_delivery_bug_never_kills_the_queue() -> None:
    seen: list[int] = []

    async def deliver(handler: str, event: object) -> None:
        if event == 0:
            raise RuntimeError("boom")
        seen.append(event)  # type: ignore[arg-type]

    queue = HookQueue("q", deliver, lambda *a: None)
    for i in range(3):
        await queue.put("on-inference", i)
    await queue.drain(2)
    assert seen == [1, 2]


def test_an_artifact_holding_half_an_emoji_pair_is_made_valid() -> None:
    verdict = judge("on-inference", Dispatch.ONCE, "artifact", '{"\\ud800k": ["a \\ud83d b", {"x": "\\udfff"}]}')
    assert verdict == Committed("artifact", {"\ufffdk": ["a \ufffd b", {"x": "\ufffd"}]})
