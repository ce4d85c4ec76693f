"""`murmurd` subcommands that live apart from `murmurd/cli.py`: each module adds its parsers and handlers."""
