"""Text that others wrote (a model's reply, its reasoning, an MCP server's message, a message in
an imported chat) as the page shows it: its Markdown rendered, its raw HTML shown as text.

The page's Markdown renderer passes HTML through a sanitizer that drops scripts and handlers but
keeps ``style``, forms, ``hidden`` and ``<details>``: a reply could cover the page with a fixed
box, post the attacker's login from a button, hide code that ▶ Run would run, or write the
markup of the page's own controls (approval, versions, Run). Here every ``<`` that would start a
tag, a comment or a declaration outside code becomes ``&#60;``, so the only HTML in a message is
what the app itself adds; Markdown (emphasis, lists, tables, code, links, maths) is unchanged.

Code is where ``<`` is text already and ``&#60;`` would show as written, so it is left alone:
fenced and indented blocks as a CommonMark parser finds them, and code spans that open and close
on one line (within one table cell). Where this reading and the page's renderer could disagree,
the text is escaped, never kept: a span left open at the line's end is not a span here, and a
result that a CommonMark parser still finds HTML in is escaped everywhere.

The escape is the numeric reference, not ``&lt;``, so that an edit (which starts from the text the
Chatbot was given) can be read back as written: ``as_written``."""

from __future__ import annotations

import re
from functools import cache

from markdown_it import MarkdownIt

ESCAPED_LT = "&#60;"
# A tag, closing tag, comment, declaration, CDATA or processing instruction starts so.
TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
# Autolinks render as links, not HTML: kept for the schemes a link may have.
AUTOLINK = re.compile(r"<(?:https?://|mailto:)[^\s<>]*>", re.IGNORECASE)
BACKTICKS = re.compile(r"`+")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def inert(markdown: str) -> str:
    """``markdown`` with its raw HTML shown as text, as the page renders it."""
    if "<" not in markdown:
        return markdown
    lines = markdown.splitlines(keepends=True)
    code, table = _line_kinds(markdown)
    shown = "".join(line if number in code else _inert_line(line, number in table) for number, line in enumerate(lines))
    if any(token.type in ("html_block", "html_inline") for token in _tokens(shown)):
        return TAG_START.sub(ESCAPED_LT, shown)
    return shown


def as_written(shown: str) -> str:
    """The text ``inert`` showed as ``shown``, back as it was written (an edited message's text)."""
    return shown.replace(ESCAPED_LT, "<")


def _tokens(markdown: str):
    for token in _parser().parse(markdown):
        yield token
        yield from token.children or ()


def _line_kinds(markdown: str) -> tuple[set[int], set[int]]:
    """The numbers of the lines in code blocks, and of those in tables."""
    code: set[int] = set()
    table: set[int] = set()
    for token in _parser().parse(markdown):
        if token.map and token.type in ("fence", "code_block"):
            start, end = token.map
            # A fence's own lines (its info string after ``` included) are code too: no HTML renders there.
            code.update(range(start, end))
        elif token.map and token.type == "table_open":
            table.update(range(*token.map))
    return code, table


def _inert_line(line: str, in_table: bool) -> str:
    if in_table:
        cells = UNESCAPED_PIPE.split(line)
        return "|".join(_inert_text(cell) for cell in cells)
    return _inert_text(line)


def _inert_text(text: str) -> str:
    """One line (or table cell) with each ``<`` that starts a tag outside a code span escaped."""
    shown = []
    at = 0
    while at < len(text):
        char = text[at]
        if char == "\\":
            shown.append(text[at:at + 2])
            at += 2
        elif char == "`":
            run = BACKTICKS.match(text, at).group()
            closing = _closing_run(text, at + len(run), len(run))
            end = closing if closing is not None else at + len(run)
            shown.append(text[at:end])
            at = end
        elif char == "<" and (link := AUTOLINK.match(text, at)):
            shown.append(link.group())
            at = link.end()
        elif TAG_START.match(text, at):
            shown.append(ESCAPED_LT)
            at += 1
        else:
            shown.append(char)
            at += 1
    return "".join(shown)


def _closing_run(text: str, start: int, length: int) -> int | None:
    """Where a code span that opened with ``length`` backticks ends (after its closing run), if it closes in ``text``."""
    for run in BACKTICKS.finditer(text, start):
        if len(run.group()) == length:
            return run.end()
    return None
