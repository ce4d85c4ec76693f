"""Which hooks a staged capsule runs, what each is bound to, and under what grant.

A hook is every `runtime: hook` artifact, in manifest order. Its own `murmur.yaml` gives the
`binding` (one handler; none: every event), the `execution_mode` and the `commit_policy`; the
capsule's entry gives `on_overflow` (async queues; `drop` by default) and `capabilities`, which
are the hook's whole grant (from nothing: no capabilities, no network and no directory; a
`filesystem.scope` becomes the hook's `.`). Its stdout, stderr and faults go to
`logs/hook-<name>.log`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from murmurd.hooks.commit import Dispatch
from murmurd.hooks.faults import hook_log_name
from murmurd.host import CallGrant, LoadedComponent
from murmurd.manifest.hooks import gets_decision_point, receives

if TYPE_CHECKING:
    from murmurd.staging.stage import StagedCapsule

DEFAULT_OVERFLOW = "drop"


@dataclass(frozen=True)
class HookSpec:
    name: str
    component: LoadedComponent
    binding: str | None
    mode: str  # blocking | async
    policy: str
    overflow: str  # drop | block
    grant: CallGrant

    @property
    def asynchronous(self) -> bool:
        return self.mode == "async"

    def exports(self, handler: str) -> bool:
        """Whether the component exports `handler` (on-task-start/-end are optional)."""
        return handler in self.component.handlers

    def receives(self, handler: str, dispatch: Dispatch = Dispatch.ONCE) -> bool:
        """Whether this hook is dispatched for `handler` at `dispatch`. A hook with no binding
        receives every event (the seed); the decision point only reaches a `deny` hook."""
        if dispatch is Dispatch.DECISION:
            return self.binding == handler and gets_decision_point(self.binding, self.policy)
        return receives(self.binding, handler)


def load_hooks(staged: StagedCapsule) -> list[HookSpec]:
    """Every hook of `staged`, in manifest order, with its grant (which carries the variables
    every hook sees, `MURMUR_OTEL_ENDPOINT` and `MURMUR_FORMATION_ID`: `StagedCapsule.call_grant`)."""
    specs: list[HookSpec] = []
    for name, installed in staged.artifacts.items():
        if installed.kind != "hook" or installed.component is None:
            continue
        own = installed.resolved.manifest
        grant = staged.call_grant(name, log_name=hook_log_name(name))
        specs.append(HookSpec(name, installed.component, own.binding, own.execution_mode, own.commit_policy,
                              installed.ref.on_overflow or DEFAULT_OVERFLOW, grant))
    return specs
