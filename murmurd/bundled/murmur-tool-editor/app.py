"""murmur-tool-editor 0.2.0: the published editor (published.py) behind the WIT `run` export.

The adapter is upstream's: `tool-input.data` is wrapped as `{"data": <parsed JSON, else the raw
string>}` and unwrapped as the native envelope is (a JSON string is parsed once more, so a
double-encoded request works); the envelope's status, summary and `data` field become the
`tool-result`, with `state_effect` in the metadata on success only. A request in murmurd's
earlier form (`op`, no `operation`: ops_murmurd.py) is answered as before.
"""

from __future__ import annotations

import json
from typing import Any

import ops_murmurd
import published
from wit_world import exports
from wit_world.exports import run

STATUS = {"passed": run.Status.PASSED, "failed": run.Status.FAILED}


def _request(data: str | None) -> tuple[Any, dict[str, Any] | None]:
    """(the request object, None) or (None, the envelope of an unusable input)."""
    if data is None:
        return None, published.fail_msg("missing data field")
    try:
        value: Any = json.loads(data)
    except ValueError:
        value = data
    if value is None:
        return None, published.fail_msg("missing data field")
    if isinstance(value, str):
        try:
            return json.loads(value), None
        except ValueError as exc:
            return None, published.fail_msg(f"invalid data JSON string: {exc}")
    if not isinstance(value, dict):
        return None, published.fail_msg("data must be a JSON string or object")
    return value, None


def _from_envelope(result: dict[str, Any]) -> run.ToolResult:
    summary = result.get("summary")
    effect = (result.get("metadata") or {}).get("state_effect")
    return run.ToolResult(STATUS.get(result.get("status"), run.Status.ERROR),
                          summary if isinstance(summary, str) else None, published.envelope_data(result), None,
                          False, [("state_effect", effect)] if isinstance(effect, str) else [])


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        request, unusable = _request(input.data)
        if unusable is not None:
            return _from_envelope(unusable)
        if ops_murmurd.is_murmurd_form(request):
            passed, summary, text, data_path, metadata = ops_murmurd.answer(request)
            status = run.Status.PASSED if passed else run.Status.FAILED
            return run.ToolResult(status, summary, text, data_path, False, metadata)
        return _from_envelope(published.run(request))
