"""The documents stay findable (issue 23 item 5): `docs/README.md` links every document,
`docs/decisions.md` opens with a table of contents listing every section, and
`docs/architecture.md` fits on one page.

`python tests/test_docs_index.py --write` rewrites the table of contents from the headings.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
TOC_START, TOC_END = "<!-- toc: rewritten by `python tests/test_docs_index.py --write` -->", "<!-- /toc -->"
ONE_PAGE_LINES = 100  # a printed page of 80-column text, headings and the diagram included


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def sections(text: str) -> list[str]:
    body = text.split(TOC_END, 1)[-1]
    headings, fenced = [], False
    for line in body.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            headings.append(line[3:].strip())
    return headings


def table_of_contents(text: str) -> str:
    entries = [f"- [{h}](#{anchor(h)})" for h in sections(text)]
    return "\n".join([TOC_START, *entries, TOC_END])


def current_toc(text: str) -> str | None:
    if TOC_START not in text or TOC_END not in text:
        return None
    return TOC_START + text.split(TOC_START, 1)[1].split(TOC_END, 1)[0] + TOC_END


def test_decisions_has_a_table_of_contents_of_every_section() -> None:
    text = (DOCS / "decisions.md").read_text(encoding="utf-8")
    assert current_toc(text) == table_of_contents(text), \
        "docs/decisions.md's table of contents is stale: run `python tests/test_docs_index.py --write`"
    assert len(sections(text)) > 10


def test_the_index_links_every_document() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w\-./]+\.md)(?:#[\w\-]*)?\)", index))
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "README.md" and p.name not in linked]
    assert missing == []
    broken = [link for link in linked if not (DOCS / link).resolve().is_file()]
    assert broken == []


def test_the_architecture_fits_on_one_page() -> None:
    lines = (DOCS / "architecture.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= ONE_PAGE_LINES, f"docs/architecture.md is {len(lines)} lines; one page is {ONE_PAGE_LINES}"


@pytest.mark.parametrize("document", ["architecture.md", "modules.md"])
def test_the_architecture_names_modules_that_exist(document: str) -> None:
    """Every `murmurd/...` path the page names is in the tree (it stays true)."""
    text = (DOCS / document).read_text(encoding="utf-8")
    root = DOCS.parent
    named = set(re.findall(r"murmurd/[\w/\-]+(?:\.py)?", text))
    assert named, f"{document} names no module"
    assert sorted(n for n in named if not (root / n).exists()) == []


def write() -> None:
    path = DOCS / "decisions.md"
    text = path.read_text(encoding="utf-8")
    toc = table_of_contents(text)
    old = current_toc(text)
    if old is not None:
        text = text.replace(old, toc)
    else:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{toc}\n{rest}"
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.exit("usage: python tests/test_docs_index.py --write")
