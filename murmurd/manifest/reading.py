"""Reading the small files a capsule is described by (manifests, lock files, prompt files).

A manifest is operator input, and so is whatever a capsule directory holds: a `murmur.yaml`
that is a FIFO (reading it would hang), a symlink to `/dev/zero` (reading it would fill memory),
YAML nested thousands deep (PyYAML's composer recurses), a number longer than Python parses, or
an alias (`*name`): a few hundred aliases of aliases expand to billions of nodes once loaded (the
"billion laughs"), and counting aliases does not bound the expansion. Nothing a manifest says
needs one, so any alias is refused. Each is refused here with a message naming the file and the limit, before anything is built.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 64
_NESTING_STARTS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_NESTING_ENDS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class UnreadableFile(OSError):
    """The file cannot be read as a small regular text file; `reason` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot read {path}: {reason}")
        self.path = path
        self.reason = reason


class YamlRefused(ValueError):
    """Valid YAML, perhaps, but past what a manifest may hold (depth, an alias, huge numbers)."""


def read_text_file(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`, or `UnreadableFile`.

    Opened non-blocking so a FIFO cannot hang the open; checked on the open descriptor (not the
    name) so what is read is what was checked. `FileNotFoundError` passes through as it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(path, exc.strerror or str(exc)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise UnreadableFile(path, f"not a regular file ({_kind(mode)})")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableFile(path, f"larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile(path, "not UTF-8 text") from None


def load_yaml(text: str, *, max_depth: int = MAX_YAML_DEPTH) -> Any:
    """`yaml.safe_load`, after an iterative pass over the event stream refuses nesting deeper
    than `max_depth` and any alias (so what is loaded is no larger than the text).
    Raises `yaml.YAMLError` for invalid YAML and `YamlRefused` for refused YAML."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, _NESTING_STARTS):
            depth += 1
            if depth > max_depth:
                raise YamlRefused(f"nested deeper than {max_depth} levels{_at(event)}")
        elif isinstance(event, _NESTING_ENDS):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            raise YamlRefused(f"holds a YAML alias (*{event.anchor}){_at(event)}; "
                              "aliases are not allowed (write the value out)")
    try:
        return yaml.safe_load(text)
    except ValueError as exc:  # int() past sys.get_int_max_str_digits, and the like
        raise YamlRefused(f"a value cannot be read: {exc}") from None


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"
