"""Which hooks a staged capsule runs, what each is bound to, and under what grant.

A hook is every `runtime: hook` artifact, in manifest order. Its own `murmur.yaml` gives the
`binding` (one handler; none: every event), the `execution_mode` and the `commit_policy`; the
capsule's entry gives `on_overflow` (async queues; `drop` by default) and `capabilities`, which
are the hook's whole grant (from nothing: no capabilities, no network and no directory; a
`filesystem.scope` becomes the hook's `.`). Its stdout, stderr and faults go to
`logs/hook-<name>.log`.

The loader takes what it needs from staging as data: the hook artifacts (`HookArtifact`) and a
way to build a grant, through the small `HookedCapsule` protocol a staged capsule satisfies. It
never imports staging (staging imports the hooks, to run `on-stage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from murmurd.hooks.commit import Dispatch
from murmurd.hooks.faults import hook_log_name
from murmurd.host import CallGrant, LoadedComponent
from murmurd.manifest.hooks import gets_decision_point, receives

DEFAULT_OVERFLOW = "drop"


@dataclass(frozen=True)
class HookArtifact:
    """One installed `runtime: hook` artifact, as staging hands it over: its own manifest's
    `binding`, `execution_mode` and `commit_policy`, the capsule entry's `on_overflow`."""

    name: str
    component: LoadedComponent
    binding: str | None
    execution_mode: str
    commit_policy: str
    on_overflow: str | None


class HookedCapsule(Protocol):
    """What the loader needs of a staged capsule (`staging.stage.StagedCapsule` is one)."""

    def hook_artifacts(self) -> list[HookArtifact]: ...

    def call_grant(self, name: str | None, *, extra_env: Mapping[str, str] | None = None,
                   log_name: str | None = None) -> CallGrant: ...


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


def hooks_hear(staged: HookedCapsule, handler: str) -> bool:
    """Whether a hook of `staged` is dispatched `handler` and exports it: what the dispatcher of a
    session of `staged` answers (`listens`), asked before any session exists."""
    return any(spec.receives(handler) and spec.exports(handler) for spec in load_hooks(staged))


def load_hooks(staged: HookedCapsule) -> list[HookSpec]:
    """Every hook of `staged`, in manifest order, with its grant (which carries the variables
    every hook sees, `MURMUR_OTEL_ENDPOINT` and `MURMUR_FORMATION_ID`: `StagedCapsule.call_grant`)."""
    specs: list[HookSpec] = []
    for hook in staged.hook_artifacts():
        grant = staged.call_grant(hook.name, log_name=hook_log_name(hook.name))
        specs.append(HookSpec(hook.name, hook.component, hook.binding, hook.execution_mode, hook.commit_policy,
                              hook.on_overflow or DEFAULT_OVERFLOW, grant))
    return specs
