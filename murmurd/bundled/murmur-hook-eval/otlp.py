"""The published eval hook's OTLP logs export (pure): one logRecord per score, stamped with the
session's trace id (the same id murmur-hook-grafana gives the session's trace)."""

from __future__ import annotations

from typing import Any

SCOPE = "murmur-hook-eval"
SCOPE_VERSION = "0.3.16"  # as the published hook writes it
FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211


def _fnv1a(data: bytes) -> int:
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def trace_id_of(session_id: str) -> str:
    h1 = _fnv1a(session_id.encode("utf-8"))
    return f"{h1:016x}{_fnv1a(h1.to_bytes(8, 'little')):016x}"


def logs_url(endpoint: str) -> str:
    """`<endpoint>/v1/logs`, the endpoint's trailing `/` dropped."""
    return endpoint.strip().rstrip("/") + "/v1/logs"


def _text(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def logs_request(score_records: list[dict[str, Any]], trace_id: str, case_id: str | None,
                 now_ns: int) -> dict[str, Any]:
    records = []
    for record in score_records:
        scorer, result, score = str(record["scorer"]), str(record["result"]), float(record["score"])
        attributes = [_text("eval.scorer", scorer), _text("eval.result", result),
                      {"key": "eval.score", "value": {"doubleValue": score}}]
        if case_id is not None:
            attributes.append(_text("eval.case_id", case_id))
        records.append({"timeUnixNano": str(now_ns), "traceId": trace_id,
                        "body": {"stringValue": f"eval.scorer={scorer} result={result} score={score:.4f}"},
                        "attributes": attributes})
    return {"resourceLogs": [{
        "resource": {"attributes": [_text("service.name", SCOPE)]},
        "scopeLogs": [{"scope": {"name": SCOPE, "version": SCOPE_VERSION}, "logRecords": records}],
    }]}
