"""Python sources into symbols and edges through tree-sitter-python (default-artifacts §5.5):
classes and functions (methods `Class::m`; functions nested in functions are not indexed),
signature = each parameter's full text joined with `,` plus `->ret`, decorators as attributes,
the docstring, `pub` unless the name starts with `_`; calls `f()` free, `x.f()` method."""

from __future__ import annotations

from tree_sitter import Language, Node, Parser
import tree_sitter_python

from parsed import Edge, Parsed, Symbol, add_call, make_symbol_id, norm

_PARSER = Parser(Language(tree_sitter_python.language()))
_STRING_PREFIX = "rRbBfFuU"


def _text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def clean_docstring(raw: str) -> str:
    text = raw.strip()
    i = 0
    while i < len(text) and i < 2 and text[i] in _STRING_PREFIX:
        i += 1
    text = text[i:]
    for quote in ('"""', "'''", '"', "'"):
        if len(text) >= 2 * len(quote) and text.startswith(quote) and text.endswith(quote):
            return text[len(quote):-len(quote)].strip()
    return text.strip()


class _Walker:
    def __init__(self, package: str, module: str) -> None:
        self.package, self.module = package, module
        self.out = Parsed([], [])

    def items(self, node: Node, prefix: str | None, parent: str | None) -> None:
        for child in node.named_children:
            attributes = ""
            definition = child
            if child.type == "decorated_definition":
                attributes = "\n".join(_text(d).strip() for d in child.named_children if d.type == "decorator")
                definition = child.child_by_field_name("definition")
                if definition is None:
                    continue
            if definition.type == "function_definition":
                self.function(definition, prefix, parent, attributes)
            elif definition.type == "class_definition":
                self.klass(definition, prefix, parent, attributes)

    def _push(self, node: Node, qualified: str, signature: str, kind: str, attributes: str) -> str:
        simple = qualified.rsplit("::", 1)[-1]
        symbol_id = make_symbol_id("python", self.package, self.module, qualified, signature)
        self.out.symbols.append(Symbol(
            symbol_id, "python", self.package, self.module, qualified, simple, signature, kind,
            node.start_point.row + 1, node.end_point.row + 1, self._doc(node),
            "" if simple.startswith("_") else "pub", attributes))
        return symbol_id

    def _contains(self, parent: str | None, child_id: str, child_name: str) -> None:
        if parent is not None:
            self.out.edges.append(Edge(parent, child_id, child_name, "contains"))

    def klass(self, node: Node, prefix: str | None, parent: str | None, attributes: str) -> None:
        name = _text(node.child_by_field_name("name"))
        if not name:
            return
        qualified = f"{prefix}::{name}" if prefix else name
        symbol_id = self._push(node, qualified, "", "class", attributes)
        self._contains(parent, symbol_id, name)
        body = node.child_by_field_name("body")
        if body is not None:
            self.items(body, qualified, symbol_id)

    def function(self, node: Node, prefix: str | None, parent: str | None, attributes: str) -> None:
        name = _text(node.child_by_field_name("name"))
        if not name:
            return
        qualified = f"{prefix}::{name}" if prefix else name
        symbol_id = self._push(node, qualified, self._signature(node), "function", attributes)
        self._contains(parent, symbol_id, name)
        body = node.child_by_field_name("body")
        if body is not None:
            seen: dict[str, str] = {}
            self._calls(body, seen)
            self.out.edges.extend(Edge(symbol_id, None, callee, "calls", style) for callee, style in seen.items())

    @staticmethod
    def _signature(node: Node) -> str:
        params = node.child_by_field_name("parameters")
        parts = [norm(_text(p)) for p in (params.named_children if params is not None else []) if p.type != "comment"]
        signature = ",".join(parts)
        returns = node.child_by_field_name("return_type")
        return f"{signature}->{norm(_text(returns))}" if returns is not None else signature

    def _calls(self, node: Node, seen: dict[str, str]) -> None:
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type == "call":
                function = current.child_by_field_name("function")
                if function is not None and function.type == "identifier":
                    add_call(seen, _text(function), "free")
                elif function is not None and function.type == "attribute":
                    attribute = function.child_by_field_name("attribute")
                    if attribute is not None:
                        add_call(seen, _text(attribute), "method")
            stack.extend(reversed(current.named_children))

    @staticmethod
    def _doc(node: Node) -> str:
        body = node.child_by_field_name("body")
        first = body.named_children[0] if body is not None and body.named_children else None
        if first is None or first.type != "expression_statement" or not first.named_children:
            return ""
        expr = first.named_children[0]
        return clean_docstring(_text(expr)) if expr.type == "string" else ""


def parse_python(source: bytes, package: str, module: str) -> Parsed:
    walker = _Walker(package, module)
    walker.items(_PARSER.parse(source).root_node, None, None)
    return walker.out
