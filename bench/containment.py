"""Cost of starting a contained shell command (`/bin/true`) under each tier, as a ratio of an
unconfined one measured in the same run (the same runner, `MURMURD_SHELL_CONFINEMENT=none`:
the helper, rlimits and pids cgroup only).

Tiers: `advisory` (no kernel mechanism), `netns+landlock` (the former scoped: namespace and
Landlock, no seccomp, no mount namespace), `scoped` (`landlock+seccomp`: closure-derived Landlock,
seccomp, the noexec workdir mount) and `sealed` (`mountns+pivot_root+landlock+seccomp`). A tier
this host cannot deliver is reported as such, never timed as if it ran.

    .venv/bin/python bench/containment.py [--runs 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.containment.host import probe_host  # noqa: E402
from murmurd.containment.plan import plan_containment  # noqa: E402
from murmurd.session.shell import run_shell  # noqa: E402
from murmurd.session.shell_model import ShellPolicy  # noqa: E402

HOST_ENV = {"PATH": "/usr/bin:/bin"}


def one_ms(policy: ShellPolicy) -> float:
    started = time.perf_counter()
    outcome = run_shell(policy, "true", [], host_env=HOST_ENV)
    elapsed = (time.perf_counter() - started) * 1000
    assert outcome.exit_code == 0, outcome.stderr
    return elapsed


def medians(policies: dict[str, ShellPolicy], runs: int) -> dict[str, float]:
    """Round-robin over the tiers (one command each per round), so load drifts hit all alike."""
    for policy in policies.values():
        one_ms(policy)  # warm: closure and filter caches, page cache
    samples: dict[str, list[float]] = {name: [] for name in policies}
    for _ in range(runs):
        for name, policy in policies.items():
            samples[name].append(one_ms(policy))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    support = probe_host()
    scoped = plan_containment(support, "auto")
    tiers = {
        "unconfined": plan_containment(support, "none"),
        "netns+landlock": dataclasses.replace(scoped, seccomp=False, mountns=False, achieved="advisory",
                                              mechanism="netns+landlock"),
        "scoped": scoped,
        "sealed": plan_containment(support, "auto", declared="sealed"),
    }
    with tempfile.TemporaryDirectory() as workdir:
        policies: dict[str, ShellPolicy] = {}
        for name, plan in tiers.items():
            wanted = {"scoped": "scoped", "sealed": "sealed"}.get(name)
            if wanted is not None and plan.achieved != wanted:
                print(f"{name:<16} not delivered on this host: {'; '.join(plan.why_not)}")
                continue
            policies[name] = ShellPolicy(allow={"true"}, workdir=Path(workdir), containment=plan)
        results = medians(policies, args.runs)
        base = results["unconfined"]
        for name, ms in results.items():
            print(f"{name:<16} {ms:7.1f} ms  x{ms / base:4.2f}  ({tiers[name].mechanism})")


if __name__ == "__main__":
    main()
