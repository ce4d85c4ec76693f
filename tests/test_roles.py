"""Role detection and contract checks over import/export names (pure logic)."""

from __future__ import annotations

import pytest

from murmurd.contract import Role
from murmurd.host.roles import ContractViolation, check_contract

WASI = ["wasi:cli/stdout@0.2.9", "wasi:io/streams@0.2.0", "wasi:filesystem/preopens@0.2.3"]
TOOL_EXPORT = ["murmur:tool/run@0.1.0"]


@pytest.mark.parametrize(
    ("imports", "exports", "expected", "role"),
    [
        (WASI + ["murmur:text/chunks@0.1.0", "murmur:task/task@0.1.0"], TOOL_EXPORT, None, Role.TOOL),
        (WASI + ["murmur:text/chunks@0.1.0"], TOOL_EXPORT, Role.DRIVER, Role.DRIVER),
        (["murmur:tool-registry/invoke@0.1.0", "murmur:tool/run@0.1.0"], ["murmur:capsule/run@0.1.0"], None, Role.CAPSULE),
        (["murmur:runtime/tokens@0.3.0", "murmur:hook/lifecycle@0.8.0"], ["murmur:hook/lifecycle@0.8.0"], Role.HOOK, Role.HOOK),
        (WASI + ["murmur:hook/lifecycle@0.8.0", "murmur:runtime/inference@0.3.0", "murmur:runtime/tokens@0.3.0",
                 "murmur:task-io/read@0.1.0", "murmur:conversation/read@0.1.0"],
         ["murmur:hook/lifecycle@0.8.0"], None, Role.HOOK),
    ],
)
def test_roles_are_detected_from_exports(imports, exports, expected, role) -> None:
    assert check_contract(imports, exports, expected) == role


@pytest.mark.parametrize(
    ("imports", "exports", "expected", "message"),
    [
        (["murmur:tool/run@0.0.9"], TOOL_EXPORT, None,
         "import murmur:tool/run@0.0.9: found version 0.0.9, this host serves murmur:tool/run@0.1.0"),
        ([], ["murmur:tool/run@0.2.0"], None,
         "export murmur:tool/run@0.2.0: found version 0.2.0, this host serves murmur:tool/run@0.1.0"),
        ([], ["murmur:hook/lifecycle@0.7.0"], None,
         "export murmur:hook/lifecycle@0.7.0: found version 0.7.0, this host serves murmur:hook/lifecycle@0.8.0"),
        (["acme:evil/thing@1.0.0"], TOOL_EXPORT, None, "import acme:evil/thing@1.0.0: unknown interface"),
        (["murmur:shell/execute@0.1.0"], TOOL_EXPORT, None,
         "import murmur:shell/execute@0.1.0: not provided to a tool component"),
        (["wasi:cli/stdout@0.3.0"], TOOL_EXPORT, None,
         "import wasi:cli/stdout@0.3.0: found version 0.3.0, this host serves wasi 0.2.x"),
        (["murmur:nope/thing@0.1.0"], TOOL_EXPORT, None, "this host serves no interface murmur:nope/thing"),
        ([], ["hello"], None, "cannot tell what this component is"),
        ([], TOOL_EXPORT, Role.HOOK, "declared as runtime 'hook' but exports murmur:tool/run@0.1.0 (a tool)"),
        ([], ["murmur:hook/lifecycle@0.8.0", "murmur:hook/stage@0.8.0"], None,
         "export murmur:hook/stage@0.8.0: this host no longer serves murmur:hook/stage "
         "(on-stage moved into murmur:hook/lifecycle@0.8.0); rebuild the hook"),
        (["murmur:hook/types@0.8.0"], ["murmur:hook/lifecycle@0.8.0"], None,
         "import murmur:hook/types@0.8.0: this host no longer serves murmur:hook/types"),
        (["murmur:runtime/inference@0.3.0"], TOOL_EXPORT, None,
         "import murmur:runtime/inference@0.3.0: not provided to a tool component"),
        (["murmur:hook/lifecycle@0.8.0"], ["murmur:capsule/run@0.1.0"], None,
         "import murmur:hook/lifecycle@0.8.0: not provided to a capsule component"),
        ([], ["murmur:capsule/run@0.1.0"], Role.TOOL, "declared as runtime 'tool'"),
    ],
)
def test_contract_violations_name_interface_and_versions(imports, exports, expected, message) -> None:
    with pytest.raises(ContractViolation) as raised:
        check_contract(imports, exports, expected)
    assert message in str(raised.value)


def test_hook_handlers_may_leave_out_the_optional_ones_and_on_stage() -> None:
    from murmurd.host.roles import check_hook_handlers

    six = ["on-session-start", "on-inference", "on-tool-call", "on-shell", "on-compaction", "on-session-end"]
    assert check_hook_handlers(six + ["message", "hook-output"]) == frozenset(six)


@pytest.mark.parametrize("missing", ["on-session-start", "on-inference", "on-tool-call", "on-shell",
                                     "on-compaction", "on-session-end"])
def test_a_missing_required_handler_is_named(missing: str) -> None:
    from murmurd.host.hook_values import HANDLERS
    from murmurd.host.roles import check_hook_handlers

    with pytest.raises(ContractViolation) as raised:
        check_hook_handlers([h for h in HANDLERS if h != missing])
    assert str(raised.value) == f"export murmur:hook/lifecycle@0.8.0 lacks the required handler {missing}"
