"""One hook in one session: its instance, and what a failed call means.

Each hook gets one persistent instance per session (its state lives across events), instantiated
at its first call. A call that traps, runs out of memory or overruns its deadline leaves the
component instance unusable: the host drops its store and the next event instantiates afresh
(the hook's in-memory state starts over; `HookInstance` does this). An `err` the handler returns
is the hook's own report; the instance keeps its state. Every failure is a line
in `logs/hook-<name>.log`; an async hook's failure is also a `hook_dispatch_error` (arm `error`,
or `timeout` for a deadline), since nothing else ever sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from murmurd.hooks.faults import HookLog
from murmurd.hooks.loading import HookSpec
from murmurd.host import ComponentHost, DeadlineExceeded, HookInstance, HostError, SessionContext
from murmurd.host.errors import HookError
from murmurd.host.hook_values import HookOutput


@dataclass(frozen=True)
class CallFailed:
    """A handler call that produced no output: why (for the log and a fail-closed denial)."""

    reason: str


class HookRunner:
    def __init__(self, spec: HookSpec, host: ComponentHost, context: SessionContext, log: HookLog) -> None:
        self.spec = spec
        self.host = host
        self.context = context
        self.log = log
        self._instance: HookInstance | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, handler: str, record: Any) -> HookOutput | CallFailed:
        """Call `handler` off the event loop; never raises but for cancellation (which cancels
        the guest: `HookInstance.call`)."""
        try:
            return await self._current().call(handler, record)
        except HookError as exc:
            return self._failed(handler, f"returned err: {exc.message}", "error")
        except HostError as exc:  # trapped, out of memory, past its deadline, cancelled
            arm = "timeout" if isinstance(exc, DeadlineExceeded) else "error"
            return self._failed(handler, f"failed: {exc.cause}", arm)

    def _current(self) -> HookInstance:
        if self._instance is None:
            self._instance = self.host.hook_instance(self.spec.component, grant=self.spec.grant,
                                                     session=self.context, name=self.spec.name)
        return self._instance

    def _failed(self, handler: str, detail: str, arm: str) -> CallFailed:
        line = f"hook {self.name}: {handler} {detail}"
        if self.spec.asynchronous:
            self.log.fault(self.name, handler, arm, line)
        else:
            self.log.line(self.name, line)
        return CallFailed(detail)

    def close(self) -> None:
        """Cancel a running call and free the instance (blocks until the call is off the worker)."""
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.close()
