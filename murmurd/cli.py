# PYTHON_ARGCOMPLETE_OK
"""The `murmurd` command line: the parser assembled from the command groups under
`murmurd/commands/` (each adds its parsers and handlers), and `main`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from murmurd import __version__, gc_command
from murmurd.commands.artifacts import add_build, add_call, add_list
from murmurd.commands.chat import add_chat
from murmurd.commands.completion import add_completion, autocomplete
from murmurd.commands.evals import add_eval
from murmurd.commands.init import add_init
from murmurd.commands.run import add_run
from murmurd.commands.serve import add_serve, check_serve_options, cmd_serve
from murmurd.commands.tasks import add_task_commands
from murmurd.commands.trace import add_trace
from murmurd.commands.validate import add_explain, add_validate
from murmurd.commands.watch import add_watch


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="murmurd", description="Run murmur capsules and serve them over A2A.")
    parser.add_argument("--version", action="version", version=f"murmurd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_build(commands)
    add_call(commands)
    add_run(commands)
    add_serve(commands)
    add_task_commands(commands)
    add_chat(commands)
    add_init(commands)
    add_completion(commands)
    add_watch(commands)
    add_validate(commands)
    add_explain(commands)
    add_list(commands)
    add_trace(commands)
    gc_command.add_parser(commands)
    add_eval(commands)
    from murmurd.registry.commands import add_commands  # install, doctor, publish, registry serve

    add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    autocomplete(parser)  # a shell asking for completions is answered here (commands/completion.py)
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is cmd_serve:
        check_serve_options(parser, args)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
