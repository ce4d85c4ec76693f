"""The operational endpoints: `GET /healthz`, `GET /readyz`, `GET /metrics`.

`/healthz` answers while the event loop does (a liveness probe restarts a wedged process, never
a busy one: it touches neither the store nor a session). `/readyz` says whether this daemon
should get new requests: its task store answers a ping within `STORE_PING_TIMEOUT_SECS`, every
component was compiled at staging, and it accepts tasks (not stopping, not draining). A failing
check answers 503 with a JSON body naming it, so a load balancer stops routing here while the
daemon finishes what it runs. `/readyz` also says which containment class this daemon's shell
children really get here (`containment`: declared floor, achieved class, installed mechanisms).
`/metrics` is the daemon's own Prometheus registry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from murmurd.a2a.core.metrics import CONTENT_TYPE
from murmurd.staging.stage import StagedCapsule

if TYPE_CHECKING:
    from murmurd.a2a.core.daemon import CapsuleDaemon

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
STORE_PING_TIMEOUT_SECS = 2.0
OK = "ok"

log = logging.getLogger("murmurd.health")


def uncompiled(staged: StagedCapsule) -> list[str]:
    """Artifacts that should hold a compiled component and do not (skills and native tools carry none)."""
    return sorted(name for name, artifact in staged.artifacts.items()
                  if artifact.kind != "skill" and not artifact.resolved.native and artifact.component is None)


def acceptance(accepting: bool, stopping: bool) -> str:
    """The `accepting` check's verdict from the daemon's two flags (pure)."""
    if stopping:
        return "shutting down: draining the running tasks, accepting none"
    return OK if accepting else "not accepting tasks"


async def store_check(daemon: CapsuleDaemon, timeout: float = STORE_PING_TIMEOUT_SECS) -> str:
    try:
        async with asyncio.timeout(timeout):
            await daemon.store.ping()
    except TimeoutError:
        return f"unreachable: no answer within {timeout:g} s"
    except Exception as exc:  # any failure of the store is a verdict, never a 500
        # the probe needs no credential, and a store's error text can name its host, port and
        # user: the daemon's log gets the text, the answer only the kind of failure
        log.warning("readiness: the task store failed its ping: %s: %s", type(exc).__name__, exc)
        return f"unreachable: {type(exc).__name__} (the daemon's log says more)"
    return OK


async def readiness(daemon: CapsuleDaemon) -> dict[str, str]:
    """Each check's verdict: "ok" or why not."""
    missing = uncompiled(daemon.staged)
    return {
        "store": await store_check(daemon),
        "components": OK if not missing else "not compiled: " + ", ".join(missing),
        "accepting": acceptance(daemon.accepting, daemon.stopped.is_set()),
    }


def containment_report(staged: StagedCapsule) -> dict[str, str]:
    """The class the capsule's shell children get on this host and the mechanisms installed."""
    from murmurd.staging.grants import containment_floor, containment_plan

    plan = containment_plan(staged.manifest, staged.host_env)
    return {"declared": containment_floor(staged.manifest), "achieved": plan.achieved, "mechanism": plan.mechanism}


def routes(daemon: CapsuleDaemon) -> APIRouter:
    """`GET /healthz`, `GET /readyz` and `GET /metrics` of `daemon`."""
    api = APIRouter()

    @api.get(HEALTH_PATH)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "alive"})

    @api.get(READY_PATH)
    async def readyz() -> JSONResponse:
        checks = await readiness(daemon)
        failed = [name for name, verdict in checks.items() if verdict != OK]
        body = {"status": "not ready" if failed else "ready", "checks": checks, "failed": failed,
                "containment": containment_report(daemon.staged)}
        return JSONResponse(body, status_code=503 if failed else 200)

    @api.get(METRICS_PATH)
    async def metrics() -> Response:
        return Response(daemon.metrics.exposition(), media_type=CONTENT_TYPE)

    return api
