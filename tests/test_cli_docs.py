"""Docs a newcomer can find (issue 25, item 5): docs/cli.md is what the parser says, every
argument of every command explains itself, docs/README.md links every page, and the README's
command list links docs/cli.md and names every command."""

from __future__ import annotations

import argparse
import re

from conftest import ROOT
from murmurd.cli import build_parser
from murmurd.commands.clidoc import render

DOCS = ROOT / "docs"


def _walk(parser: argparse.ArgumentParser, prog: str = "murmurd"):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{prog} {name}")


def test_docs_cli_md_is_generated_from_the_parser() -> None:
    expected = render(build_parser())
    assert (DOCS / "cli.md").read_text() == expected, (
        "docs/cli.md is out of date: python -m murmurd.commands.clidoc > docs/cli.md")


def test_every_argument_of_every_command_has_help_and_a_section() -> None:
    text = (DOCS / "cli.md").read_text()
    for prog, parser in _walk(build_parser()):
        for action in parser._actions:
            if action.dest != "help" and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{prog}: {action.option_strings or action.dest} has no help text"
        if prog != "murmurd":
            assert f"# `{prog}`\n" in text


def test_docs_readme_links_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+)", index))
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert page.name in linked, f"docs/README.md does not link {page.name}"
    for target in linked:
        if "://" not in target:
            assert (DOCS / target).resolve().exists(), f"docs/README.md links a missing {target}"


def test_the_readme_command_list_is_short_and_names_every_command() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Commands\n", 1)[1].split("\n## ", 1)[0]
    assert "(docs/cli.md)" in section
    assert not any(line.startswith("|") for line in section.splitlines())  # a list, not the old table
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in commands.choices:
        if name not in ("completion", "watch"):
            assert f"murmurd {name}" in section, name
