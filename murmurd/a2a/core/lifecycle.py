"""The capsule's lifecycle policy as the daemon applies it: the manifest's `lifecycle` block
with the `serve` flags that override it.

Upstream's defaults (`single`, `exit`, the idle rule) suit `mur run`'s one launch per task. A
command named `serve` serves: under `murmurd serve`, a manifest (and command line) that leaves
both `task_acceptance` and `after_task` unset runs as `queue` + `after_task: sleep`, which stays
up until it is stopped and never runs the idle rule's empty task. Naming either one, in
`murmur.yaml` or with a flag, is an explicit choice and gets upstream's lifecycle exactly (the
other field taking upstream's default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from murmurd.a2a.core.admission import concurrency_bound
from murmurd.manifest.capsule import CapsuleManifest

SERVE_TASK_ACCEPTANCE = "queue"
SERVE_AFTER_TASK = "sleep"


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
    origin: str = "upstream"  # where task_acceptance/after_task came from: upstream | serve-default

    @property
    def bound(self) -> int:
        """Tasks running at once (1 unless `queue`)."""
        return concurrency_bound(self.task_acceptance, self.max_concurrent_tasks)

    @property
    def idle_rule(self) -> bool:
        """Upstream's idle rule applies: every mode but `queue` + `after_task: sleep`."""
        return not (self.task_acceptance == "queue" and self.after_task == "sleep")

    def describe(self) -> str:
        """`task_acceptance: queue, after_task: sleep (serve's default: no lifecycle set)`."""
        where = "serve's default: the manifest sets neither" if self.origin == "serve-default" else "as set"
        return f"task_acceptance: {self.task_acceptance}, after_task: {self.after_task} ({where})"

    @classmethod
    def from_manifest(
        cls, manifest: CapsuleManifest, *, task_acceptance: str | None = None, after_task: str | None = None,
        max_concurrent_tasks: int | None = None, session_idle_secs: float = 60.0, serving: bool = False,
    ) -> LifecyclePolicy:
        """`serving`: the `murmurd serve` rule (module docstring); else upstream's defaults."""
        lifecycle = manifest.lifecycle
        explicit = lifecycle.model_fields_set & {"task_acceptance", "after_task"}
        origin = "upstream"
        if serving and not explicit and task_acceptance is None and after_task is None:
            task_acceptance, after_task, origin = SERVE_TASK_ACCEPTANCE, SERVE_AFTER_TASK, "serve-default"
        return cls(
            task_acceptance=task_acceptance or lifecycle.task_acceptance,
            after_task=after_task or lifecycle.after_task,
            max_concurrent_tasks=max_concurrent_tasks or lifecycle.max_concurrent_tasks,
            session_idle_secs=session_idle_secs,
            queue_depth=lifecycle.queue_depth,
            input_timeout_secs=lifecycle.input_timeout_secs,
            conversation=lifecycle.conversation,
            idle_timeout_secs=float(os.environ.get("MURMUR_A2A_TIMEOUT_SECS", "30")),
            origin=origin,
        )
