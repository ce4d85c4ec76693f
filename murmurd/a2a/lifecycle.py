"""The capsule's lifecycle policy as the daemon applies it: the manifest's `lifecycle` block
with the `serve` flags that override it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from murmurd.a2a.admission import concurrency_bound
from murmurd.manifest.capsule import CapsuleManifest


@dataclass(frozen=True)
class LifecyclePolicy:
    task_acceptance: str = "single"  # none | single | queue
    after_task: str = "exit"  # exit | sleep
    queue_depth: int = 1
    input_timeout_secs: float | None = None
    conversation: str = "stateless"  # stateless | threaded
    idle_timeout_secs: float = 30.0
    max_concurrent_tasks: int | None = None  # None: admission.DEFAULT_QUEUE_BOUND under `queue`
    session_idle_secs: float = 60.0  # a context's session stays open this long after its last task

    @property
    def bound(self) -> int:
        """Tasks running at once (1 unless `queue`)."""
        return concurrency_bound(self.task_acceptance, self.max_concurrent_tasks)

    @classmethod
    def from_manifest(
        cls, manifest: CapsuleManifest, *, task_acceptance: str | None = None, after_task: str | None = None,
        max_concurrent_tasks: int | None = None, session_idle_secs: float = 60.0,
    ) -> LifecyclePolicy:
        lifecycle = manifest.lifecycle
        return cls(
            task_acceptance=task_acceptance or lifecycle.task_acceptance,
            after_task=after_task or lifecycle.after_task,
            max_concurrent_tasks=max_concurrent_tasks or lifecycle.max_concurrent_tasks,
            session_idle_secs=session_idle_secs,
            queue_depth=lifecycle.queue_depth,
            input_timeout_secs=lifecycle.input_timeout_secs,
            conversation=lifecycle.conversation,
            idle_timeout_secs=float(os.environ.get("MURMUR_A2A_TIMEOUT_SECS", "30")),
        )
