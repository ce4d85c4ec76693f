"""`shell-event.recipe`: the body of the recipe a build-tool call names (seed field notes).

A hook holds no grant on the workdir, so the runtime reads the recipe for it:

| Invocation        | Body                                                                    |
|-------------------|-------------------------------------------------------------------------|
| `make <target>`   | the target's recipe lines, from `GNUmakefile`, `makefile` or `Makefile` |
| `just <recipe>`   | the recipe's indented body, from `justfile`, `.justfile`, `Justfile`, `JUSTFILE` |
| `npm run <script>`| the `scripts` entry of `package.json`                                   |

`recipe_request` and the `*_recipe` parsers are pure; `read_recipe` reads the files through
`workdir_fs` (no symlink followed, at most `MAX_RECIPE_FILE_BYTES`). With no target named, the
default goal is used (make's first target, just's first recipe); anything unresolvable is None.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from murmurd import workdir_fs

MAX_RECIPE_FILE_BYTES = 1024 * 1024
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
JUSTFILES = ("justfile", ".justfile", "Justfile", "JUSTFILE")
_MAKE_VALUE_OPTIONS = frozenset({"-f", "--file", "--makefile", "-C", "--directory", "-I", "--include-dir",
                                 "-o", "--old-file", "-W", "--what-if", "--new-file", "--assume-new", "-j", "-l"})
_JUST_VALUE_OPTIONS = frozenset({"-f", "--justfile", "-d", "--working-directory", "--set", "--shell",
                                 "--shell-arg", "--dotenv-filename", "--dotenv-path", "--color", "--command"})
_TWO_VALUES = frozenset({"--set"})  # `just --set NAME VALUE`
_MAKE_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)(.*)$")
_JUST_HEADER = re.compile(r"^@?([A-Za-z_][A-Za-z0-9_-]*)\b[^:]*:(?!=)")


@dataclass(frozen=True)
class RecipeRequest:
    tool: str  # make | just | npm
    target: str | None  # None: the default goal
    directory: str = "."  # `make -C dir`


def recipe_request(binary: str, argv: list[str]) -> RecipeRequest | None:
    """Which recipe a shell call names. `argv[0]` is the invoked name (a path's last part counts)."""
    if not argv:
        return None
    name = binary.rsplit("/", 1)[-1]
    args = argv[1:]
    if name == "make":
        target, directory = _positional(args, _MAKE_VALUE_OPTIONS, skip_assignments=True)
        return RecipeRequest("make", target, directory or ".")
    if name == "just":
        target, _ = _positional(args, _JUST_VALUE_OPTIONS, skip_assignments=True)
        return RecipeRequest("just", target)
    if name == "npm" and args[:1] in (["run"], ["run-script"]):
        target, _ = _positional(args[1:], frozenset({"--prefix", "-w", "--workspace"}), skip_assignments=False)
        return RecipeRequest("npm", target) if target else None
    return None


def _positional(args: list[str], value_options: frozenset[str], *, skip_assignments: bool) -> tuple[str | None, str | None]:
    """The first positional argument (skipping options and their values), and any `-C` directory."""
    directory: str | None = None
    skip = 0
    previous = ""
    for arg in args:
        if skip:
            skip -= 1
            if previous in ("-C", "--directory"):
                directory = arg
            continue
        if arg == "--":
            continue
        if arg.startswith("-"):
            if arg in value_options:
                skip, previous = (2 if arg in _TWO_VALUES else 1), arg
            elif arg.startswith("--directory="):
                directory = arg.split("=", 1)[1]
            continue
        if skip_assignments and "=" in arg:
            continue
        return arg, directory
    return None, directory


def make_recipe(text: str, target: str | None) -> str | None:
    """The recipe lines (tab removed) of `target`, or of the first ordinary target."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("\t"):
            continue
        match = _MAKE_RULE.match(line)
        if match is None:
            continue
        targets = match.group(1).split()
        wanted = target if target is not None else next((t for t in targets if not t.startswith(".")), None)
        if wanted is None or wanted not in targets:
            continue
        body: list[str] = []
        inline = match.group(2).partition(";")[2].strip()
        if inline:
            body.append(inline)
        for follower in lines[index + 1:]:
            if follower.startswith("\t"):
                body.append(follower[1:])
            elif follower.strip() == "" or follower.lstrip().startswith("#"):
                continue
            else:
                break
        return "\n".join(body)
    return None


def just_recipe(text: str, target: str | None) -> str | None:
    """The indented body (common indentation removed) of `target`, or of the first recipe."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line or line[0].isspace() or line.startswith(("#", "[", "set ", "alias ", "export ", "import ", "mod ")):
            continue
        match = _JUST_HEADER.match(line)
        if match is None or (target is not None and match.group(1) != target):
            continue
        body: list[str] = []
        for follower in lines[index + 1:]:
            if follower.strip() == "":
                body.append("")
                continue
            if not follower[0].isspace():
                break
            body.append(follower)
        while body and body[-1] == "":
            body.pop()
        indent = min((len(b) - len(b.lstrip()) for b in body if b), default=0)
        return "\n".join(b[indent:] for b in body)
    return None


def npm_recipe(text: str, target: str | None) -> str | None:
    try:
        package = json.loads(text)
    except ValueError:
        return None
    scripts = package.get("scripts") if isinstance(package, dict) else None
    value = scripts.get(target) if isinstance(scripts, dict) and target else None
    return value if isinstance(value, str) else None


_FILES = {"make": MAKEFILES, "just": JUSTFILES, "npm": ("package.json",)}
_PARSERS = {"make": make_recipe, "just": just_recipe, "npm": npm_recipe}


def read_recipe(root: Path, request: RecipeRequest) -> str | None:
    """The recipe body read from the workdir `root` (the shell's cwd), or None."""
    for name in _FILES[request.tool]:
        rel = name if request.directory in ("", ".") else f"{request.directory.rstrip('/')}/{name}"
        try:
            data = workdir_fs.read_bytes(root, rel, max_bytes=MAX_RECIPE_FILE_BYTES)
        except (OSError, ValueError):
            continue
        return _PARSERS[request.tool](data.decode("utf-8", errors="replace"), request.target)
    return None
