"""Rust sources into symbols and edges through tree-sitter-rust (default-artifacts §5.5):
fn items (bodiless trait/extern signatures too), struct, enum, union, const, static, type,
macro_rules!, trait, mod; `impl T` is transparent (methods `T::m`, generics stripped), trait
methods `Trait::m`, an inline `mod x {}` extends the module; `contains` edges from a mod or trait
to its children; calls `foo()` free, `a::b::foo()` path, `x.foo()` method (turbofish unwrapped).
Items nested in function bodies are not indexed; macro calls are not counted."""

from __future__ import annotations

import re

from tree_sitter import Language, Node, Parser
import tree_sitter_rust

from parsed import Edge, Parsed, Symbol, add_call, make_symbol_id, norm

_PARSER = Parser(Language(tree_sitter_rust.language()))
_KINDS = {"struct_item": "struct", "enum_item": "enum", "union_item": "union", "const_item": "const",
          "static_item": "static", "type_item": "type", "macro_definition": "macro"}
_GENERICS = re.compile(r"<.*>", re.S)


def _text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _doc_and_attributes(node: Node) -> tuple[str, str]:
    """The `///`/`//!`/`/** */` run and the `#[...]` items directly before `node`."""
    docs: list[str] = []
    attributes: list[str] = []
    sibling, below = node.prev_named_sibling, node.start_point.row
    while sibling is not None and sibling.type in ("line_comment", "block_comment", "attribute_item"):
        last_row = sibling.end_point.row - (1 if sibling.end_point.column == 0 else 0)  # a line comment ends past its \n
        if last_row < below - 1:
            break  # a blank line: no longer directly before the item
        below = sibling.start_point.row
        text = _text(sibling).strip()
        if sibling.type == "attribute_item":
            attributes.insert(0, text)
        elif text.startswith(("///", "//!")):
            docs.insert(0, text[3:].strip())
        elif text.startswith("/**"):
            docs.insert(0, text[3:].removesuffix("*/").strip())
        else:
            break
        sibling = sibling.prev_named_sibling
    return "\n".join(docs), "\n".join(attributes)


def _visibility(node: Node) -> str:
    found = next((c for c in node.named_children if c.type == "visibility_modifier"), None)
    return norm(_text(found))


def _signature(node: Node) -> str:
    params = node.child_by_field_name("parameters")
    parts: list[str] = []
    for param in params.named_children if params is not None else []:
        if param.type == "self_parameter":
            parts.append(norm(_text(param)))
        elif param.type == "variadic_parameter":
            parts.append("...")
        elif param.type == "parameter":
            kind = param.child_by_field_name("type")
            parts.append(norm(_text(kind)) if kind is not None else "_")
    signature = ",".join(parts)
    returns = node.child_by_field_name("return_type")
    return f"{signature}->{norm(_text(returns))}" if returns is not None else signature


def _callee(function: Node) -> tuple[str, str] | None:
    if function.type == "generic_function":  # foo::<T>()
        inner = function.child_by_field_name("function")
        return _callee(inner) if inner is not None else None
    if function.type == "identifier":
        return _text(function), "free"
    if function.type == "scoped_identifier":
        name = function.child_by_field_name("name")
        return (_text(name), "path") if name is not None else None
    if function.type == "field_expression":
        field = function.child_by_field_name("field")
        return (_text(field), "method") if field is not None else None
    return None


class _Walker:
    def __init__(self, package: str, module: str) -> None:
        self.package = package
        self.out = Parsed([], [])
        self.root_module = module

    def _push(self, node: Node, module: str, qualified: str, signature: str, kind: str) -> str:
        doc, attributes = _doc_and_attributes(node)
        symbol_id = make_symbol_id("rust", self.package, module, qualified, signature)
        self.out.symbols.append(Symbol(
            symbol_id, "rust", self.package, module, qualified, qualified.rsplit("::", 1)[-1], signature, kind,
            node.start_point.row + 1, node.end_point.row + 1, doc, _visibility(node), attributes))
        return symbol_id

    def _contains(self, parent: str | None, child_id: str, name: str) -> None:
        if parent is not None:
            self.out.edges.append(Edge(parent, child_id, name, "contains"))

    def items(self, node: Node, module: str, prefix: str | None, parent: str | None) -> None:
        for child in node.named_children:
            name = _text(child.child_by_field_name("name"))
            qualified = f"{prefix}::{name}" if prefix else name
            if child.type in ("function_item", "function_signature_item") and name:
                symbol_id = self._push(child, module, qualified, _signature(child), "function")
                self._contains(parent, symbol_id, name)
                body = child.child_by_field_name("body")
                if body is not None:
                    self._calls(body, symbol_id)
            elif child.type in _KINDS and name:
                self._contains(parent, self._push(child, module, qualified, "", _KINDS[child.type]), name)
            elif child.type == "trait_item" and name:
                symbol_id = self._push(child, module, qualified, "", "trait")
                self._contains(parent, symbol_id, name)
                body = child.child_by_field_name("body")
                if body is not None:
                    self.items(body, module, qualified, symbol_id)
            elif child.type == "mod_item" and name:
                symbol_id = self._push(child, module, name, "", "mod")
                self._contains(parent, symbol_id, name)
                body = child.child_by_field_name("body")
                if body is not None:
                    self.items(body, f"{module}::{name}" if module else name, None, symbol_id)
            elif child.type == "impl_item":
                target = child.child_by_field_name("type")
                body = child.child_by_field_name("body")
                if target is not None and body is not None:
                    self.items(body, module, norm(_GENERICS.sub("", _text(target))), parent)
            elif child.type in ("foreign_mod_item", "extern_block"):
                body = child.child_by_field_name("body") or next(
                    (c for c in child.named_children if c.type == "declaration_list"), None)
                if body is not None:
                    self.items(body, module, prefix, parent)

    def _calls(self, body: Node, src: str) -> None:
        seen: dict[str, str] = {}
        stack = [body]
        while stack:
            current = stack.pop()
            if current.type == "call_expression":
                function = current.child_by_field_name("function")
                found = _callee(function) if function is not None else None
                if found and found[0]:
                    add_call(seen, *found)
            stack.extend(reversed(current.named_children))
        self.out.edges.extend(Edge(src, None, name, "calls", style) for name, style in seen.items())


def parse_rust(source: bytes, package: str, module: str) -> Parsed:
    walker = _Walker(package, module)
    walker.items(_PARSER.parse(source).root_node, module, None, None)
    return walker.out
