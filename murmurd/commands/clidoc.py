"""docs/cli.md, generated from the argument parser: one section per command (and per `trace` /
`eval` subcommand), its usage and a table of its arguments by group. tests/test_cli_docs.py
fails when the file and the parser disagree; regenerate with

    python -m murmurd.commands.clidoc > docs/cli.md
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

HEADER = """# The `murmurd` command line

Generated from the argument parser (`python -m murmurd.commands.clidoc > docs/cli.md`;
tests/test_cli_docs.py keeps it in step). `murmurd COMMAND --help` prints the same, and
`eval "$(murmurd completion bash)"` (or `zsh`) completes every command and flag below.
[docs/README.md](README.md) indexes the rest of the documentation.
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order `--help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`" + (" (optional)" if action.nargs in ("?", "*") else "")
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs == 0:
        return names
    value = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices else
                               action.dest.upper())
    return f"{names} `{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _usage(prog: str, parser: argparse.ArgumentParser) -> str:
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    words = [prog, "[options]" if any(a.option_strings and a.dest != "help" for a in parser._actions) else ""]
    for action in positionals:
        name = str(action.metavar or action.dest)
        words.append(f"[{name}]" if action.nargs in ("?",) else f"[{name}...]" if action.nargs == "*" else
                     f"{name}..." if action.nargs == "+" else name)
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        words.append("COMMAND ...")
    return " ".join(w for w in words if w)


def _section(prog: str, summary: str, parser: argparse.ArgumentParser, level: int) -> Iterator[str]:
    yield f"{'#' * level} `{prog}`"
    yield ""
    if summary:
        yield summary[0].upper() + summary[1:] + "."
        yield ""
    yield "```"
    yield _usage(prog, parser)
    yield "```"
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.dest != "help" and not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        yield ""
        title = {"positional arguments": "arguments", "options": "options"}.get(group.title or "", group.title)
        yield f"**{title}**" + (f": {group.description}" if group.description else "")
        yield ""
        yield "| argument | what it does |"
        yield "|---|---|"
        for action in actions:
            yield f"| {_flag(action)} | {_cell(action.help or '')} |"
    yield ""
    for name, help_text, sub in _subcommands(parser):
        yield from _section(f"{prog} {name}", help_text, sub, level + 1)


def render(parser: argparse.ArgumentParser) -> str:
    lines = [HEADER, "## Commands", ""]
    commands = _subcommands(parser)
    lines += [f"- [`murmurd {name}`](#murmurd-{name}): {help_text}" for name, help_text, _ in commands]
    lines.append("")
    for name, help_text, sub in commands:
        lines += list(_section(f"murmurd {name}", help_text, sub, 2))
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    from murmurd.cli import build_parser

    print(render(build_parser()), end="")


if __name__ == "__main__":
    main()
