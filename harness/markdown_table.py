"""The benchmarks' tables in Markdown (header, separator, a line per row), as docs/benchmarks.md
quotes them; tests/test_benchmarks.py reads them back to check that each table has its rows."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

SEPARATOR = re.compile(r"\|(\s*:?-+:?\s*\|)+")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return "\n".join(_line(cells) for cells in (header, ["---"] * len(header), *rows))


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip()[1:-1].split("|")]


def table_rows(text: str, first_column: str) -> list[list[str]] | None:
    """The rows of the table in ``text`` whose header starts with ``first_column``, each a list of
    its cells; None where there is no such header followed by a separator of as many cells. A row
    is a line that follows the separator, up to the first line that is not one of the table's."""
    lines = [line.strip() for line in text.splitlines()]
    for at, line in enumerate(lines[:-1]):
        if not (line.startswith("|") and line.endswith("|") and _cells(line)[0] == first_column):
            continue
        width = len(_cells(line))
        if not (SEPARATOR.fullmatch(lines[at + 1]) and len(_cells(lines[at + 1])) == width):
            continue
        rows = []
        for row in lines[at + 2:]:
            if not (row.startswith("|") and row.endswith("|") and len(_cells(row)) == width):
                break
            rows.append(_cells(row))
        return rows
    return None
