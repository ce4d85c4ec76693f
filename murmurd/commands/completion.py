"""Shell completion for bash and zsh, generated from the argument parser by argcomplete.

`eval "$(murmurd completion bash)"` (or `zsh`) in the shell's rc file: the shell then asks
`murmurd` itself for candidates (argcomplete runs the parser with `_ARGCOMPLETE` set and exits
before any command runs), so completions always match the installed version's flags."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(["murmurd"], shell=args.shell))
    return 0


def add_completion(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    completion = commands.add_parser("completion", help="print the bash or zsh completion script (eval it in your rc file)")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion.set_defaults(handler=cmd_completion)


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit, when the shell made one; otherwise do nothing."""
    import os

    if "_ARGCOMPLETE" not in os.environ:
        return  # the ordinary run: no argcomplete import at all
    import argcomplete

    argcomplete.autocomplete(parser)
