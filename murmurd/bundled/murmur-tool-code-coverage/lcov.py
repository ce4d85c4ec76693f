"""LCOV tracefiles: per source file, the lines with hits > 0 (`SF:` opens a file, `DA:line,hits`,
`end_of_record` closes it; a file with no hit lines is dropped)."""

from __future__ import annotations


def parse_lcov(text: str) -> dict[str, set[int]]:
    sections: dict[str, set[int]] = {}
    current: str | None = None
    hits: set[int] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("SF:"):
            current, hits = line[3:].strip(), set()
        elif line.startswith("DA:") and current is not None:
            fields = line[3:].split(",")
            if len(fields) >= 2 and fields[0].strip().isdigit():
                try:
                    if int(fields[1].strip()) > 0:
                        hits.add(int(fields[0]))
                except ValueError:
                    continue
        elif line == "end_of_record" and current is not None:
            if hits:
                sections.setdefault(current, set()).update(hits)
            current, hits = None, set()
    return sections
