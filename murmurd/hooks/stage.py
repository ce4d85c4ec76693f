"""`on-stage`: once at capsule staging, before any session, the only handler staging waits for.

Every hook that receives `on-stage` (bound to it, or bound to nothing) is called in manifest
order with the capsule's `shell.allow`, on a short-lived instance of its own (there is no
session yet: its imports answer "no task", and faults go to `logs/hook-<name>.log` only, since
no trace exists). The committed arm is `write-manifests`: each `tool-manifest` is checked
(`hooks.manifests`) and returned for staging to write; a refused one is logged and skipped. A
hook without an `on-stage` export is logged and skipped; one that errs or traps is logged and
staging goes on. Runs on the calling thread: staging is never on the event loop.
"""

from __future__ import annotations

from murmurd.hooks.commit import Dispatch, Fault, judge
from murmurd.hooks.faults import HookLog
from murmurd.hooks.loading import HookSpec
from murmurd.hooks.manifests import ManifestRefused, ShellManifest, check_tool_manifest
from murmurd.host import ComponentHost, HostError, SessionContext
from murmurd.host.hook_values import StageEvent

HANDLER = "on-stage"


def run_on_stage(host: ComponentHost, specs: list[HookSpec], shell_allow: list[str], log: HookLog) -> list[ShellManifest]:
    """Dispatch `on-stage` to every hook that receives it; the checked manifests to write."""
    manifests: list[ShellManifest] = []
    for spec in specs:
        if not spec.receives(HANDLER):
            continue
        if not spec.exports(HANDLER):
            log.line(spec.name, f"hook {spec.name}: exports no {HANDLER}; not dispatched, staging continues")
            continue
        instance = host.hook_instance(spec.component, grant=spec.grant, session=SessionContext(), name=spec.name)
        try:
            output = instance.call_sync(HANDLER, StageEvent(list(shell_allow)))
        except HostError as exc:  # HookError (its err arm) included
            log.line(spec.name, f"hook {spec.name}: {HANDLER} failed: {exc.cause}; staging continues")
            continue
        finally:
            instance.close()
        verdict = judge(HANDLER, Dispatch.ONCE, output.arm, output.value, asynchronous=spec.asynchronous)
        if isinstance(verdict, Fault):
            log.discarded(spec.name, HANDLER, verdict.arm, verdict.reason)
        elif verdict is not None:
            manifests += _checked(spec.name, verdict.value, shell_allow, log)
    return manifests


def _checked(hook: str, entries: list, shell_allow: list[str], log: HookLog) -> list[ShellManifest]:
    kept: list[ShellManifest] = []
    for entry in entries:
        try:
            kept.append(check_tool_manifest(entry.binary_name, entry.content, shell_allow))
        except ManifestRefused as exc:
            log.line(hook, f"hook {hook}: {HANDLER}: write-manifests entry refused, not written: {exc}")
    return kept
