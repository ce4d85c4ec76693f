"""The project `.env` that `mur run` reads before the manifest (upstream `murmur-artifact/dotenv.rs`).

Walk up from the manifest directory to the first directory holding `murmur.yaml` and read its
`.env`: blank and `#` lines are skipped; every other line is `KEY=VALUE`, split at the first
`=`, both sides trimmed, one pair of matching surrounding quotes removed. A variable already in
the environment is never overridden. A line without `=`, or with an empty key, is an error naming
the line, and nothing runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from murmurd.manifest.reading import UnreadableFile, read_text_file
from murmurd.manifest.validate import MANIFEST_FILE

ENV_FILE = ".env"


class DotenvError(ValueError):
    """`E-IO-003`: the `.env` file has a malformed line (or cannot be read)."""


def project_dir(manifest_dir: Path) -> Path | None:
    """The first directory from `manifest_dir` upwards that holds a `murmur.yaml`."""
    start = Path(manifest_dir).resolve()
    for directory in (start, *start.parents):
        if (directory / MANIFEST_FILE).is_file():
            return directory
    return None


def parse_dotenv(text: str, source: str = ENV_FILE) -> dict[str, str]:
    """The pairs of a `.env` text, in order; `DotenvError` names the first malformed line."""
    pairs: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise DotenvError(f"E-IO-003: invalid .env entry at line {number}: {raw!r} ({source}); "
                              "expected KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs[key] = value
    return pairs


def with_dotenv(manifest_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus the project `.env`'s variables that `env` does not already set."""
    merged = dict(env)
    project = project_dir(manifest_dir)
    if project is None:
        return merged
    file = project / ENV_FILE
    try:
        text = read_text_file(file)  # the manifest reader: a regular file, size-capped, no FIFO hang
    except FileNotFoundError:
        return merged
    except UnreadableFile as exc:
        raise DotenvError(f"E-IO-003: {exc}") from None
    for key, value in parse_dotenv(text, str(file)).items():
        merged.setdefault(key, value)
    return merged
