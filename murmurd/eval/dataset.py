"""The task set `murmurd eval run` reruns: upstream's dataset file, JSON lines.

Each line is `{"case_id": str, "task_path": str, "expected": any?}`; murmurd also accepts
`"task": str` (the task text inline) in place of `task_path`. `task_path` is read relative to the
dataset file's directory and must stay beneath it: an absolute path, a `..` that climbs out, or a
symlink that leads out is refused (`E-EVAL-003`, naming the line), so a dataset cannot read a file
its directory does not hold into a case's task. `expected` is kept but unused (as upstream). Blank lines are skipped; a
missing, empty or malformed file is an error naming the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from murmurd.manifest.reading import UnreadableFile, read_text_file
from murmurd.traceview.errors import ReadError

BAD_DATASET = "E-EVAL-003"


@dataclass(frozen=True)
class Case:
    case_id: str
    task_path: Path | None
    task: str | None  # inline task text (murmurd's extension)


def _beneath(dataset: Path, number: int, case_id: str, task_path: str) -> Path:
    """`task_path` resolved beneath the dataset's directory (symlinks followed), else an error."""
    base = dataset.parent.resolve()
    where = f"{dataset}:{number}: case {case_id!r}: task_path {task_path!r}"
    if Path(task_path).is_absolute() or "\0" in task_path:
        raise ReadError(BAD_DATASET, f"{where} is absolute; it must name a file beneath {base}")
    resolved = (base / task_path).resolve()
    if not resolved.is_relative_to(base):
        raise ReadError(BAD_DATASET, f"{where} leads outside the dataset's directory; "
                                     f"it must name a file beneath {base}")
    return resolved


def _case(raw: str, path: Path, number: int) -> Case:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ReadError(BAD_DATASET, f"{path}:{number}: not a JSON line ({exc})") from None
    if not isinstance(value, dict) or not isinstance(value.get("case_id"), str) or not value["case_id"]:
        raise ReadError(BAD_DATASET, f"{path}:{number}: want an object with a non-empty string case_id")
    task_path, task = value.get("task_path"), value.get("task")
    if isinstance(task_path, str) and task_path:
        return Case(value["case_id"], _beneath(path, number, value["case_id"], task_path), None)
    if isinstance(task, str):
        return Case(value["case_id"], None, task)
    raise ReadError(BAD_DATASET, f"{path}:{number}: case {value['case_id']!r} needs a string task_path (or task)")


def load_dataset(path: Path) -> list[Case]:
    try:
        text = read_text_file(path)
    except (OSError, UnreadableFile) as exc:
        raise ReadError(BAD_DATASET, f"dataset {path}: {getattr(exc, 'strerror', None) or exc}") from None
    cases = [_case(line, path, n) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not cases:
        raise ReadError(BAD_DATASET, f"dataset {path}: no cases")
    seen: set[str] = set()
    for case in cases:
        if case.case_id in seen:
            raise ReadError(BAD_DATASET, f"dataset {path}: case_id {case.case_id!r} appears twice")
        seen.add(case.case_id)
    return cases
