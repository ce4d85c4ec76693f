"""YAML the runtime writes (`murmur.lock`, an installed artifact's `murmur.yaml`), in the form its
own reader accepts: never an alias.

PyYAML writes an anchor and an alias (`&id001` / `*id001`) whenever one object appears twice in
the data, and `reading.load_yaml` refuses every alias (a count of aliases never bounded what
they expand to). So the runtime, and anything generating manifests with PyYAML, writes each
value out in full.
"""

from __future__ import annotations

from typing import Any

import yaml


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any, *, sort_keys: bool = False) -> str:
    """`yaml.safe_dump` with every repeated value written out instead of aliased."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=sort_keys)
