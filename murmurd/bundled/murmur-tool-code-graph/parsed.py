"""What a source file's parse yields: symbols and raw edges, and the stable symbol id."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Symbol:
    symbol_id: str
    language: str
    package: str
    module: str
    qualified_name: str
    simple_name: str
    signature: str
    kind: str
    start_line: int
    end_line: int
    doc_comment: str = ""
    visibility: str = ""
    attributes: str = ""


@dataclass
class Edge:
    src_symbol_id: str
    dst_symbol_id: str | None
    dst_name: str
    edge_kind: str  # calls | contains
    call_style: str = ""  # free | path | method | ''


@dataclass
class Parsed:
    symbols: list[Symbol]
    edges: list[Edge]


def make_symbol_id(scheme: str, package: str, module: str, qualified_name: str, signature: str) -> str:
    """`<scheme>://<package>/<module>#<qualified_name>(<signature>)`."""
    return f"{scheme}://{package}/{module}#{qualified_name}({signature})"


def norm(text: str) -> str:
    """Whitespace collapsed to single spaces."""
    return " ".join(text.split())


def add_call(seen: dict[str, str], name: str, style: str) -> None:
    """Calls deduplicated per function, `method` winning over any other style."""
    if name not in seen or style == "method":
        seen[name] = style
