"""A document split into passages: a few paragraphs each, never across a page of a PDF, a new one
at each heading, each knowing the page and the heading it falls under (what a citation shows)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines.prompt.documents import Document

# About 200 tokens of English: within the embedding model's 256-token window, and small enough
# that a few of them answer a question without spending the context on what surrounds it.
PASSAGE_CHARACTERS = 900
# A paragraph longer than a passage is cut at a sentence end (else at a space) near this.
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+)$")
# "3.2 Warranty", "Chapter 4: Care", "SECTION 7": a short line that opens a part of a document.
_NUMBERED_HEADING = re.compile(r"^((\d+(\.\d+)*\.?)|chapter \w+:?|section \w+:?|part \w+:?)\s+\S.{0,70}(?<![.,;:])$", re.IGNORECASE)


@dataclass(frozen=True)
class Passage:
    """``ordinal``: its place in the document, from 0. ``page``: the PDF page it is on (None for
    other formats). ``heading``: the heading it falls under ("" before the first)."""

    ordinal: int
    page: int | None
    heading: str
    text: str

    def for_search(self) -> str:
        """What is embedded: the heading says what the passage is about when its text does not."""
        return f"{self.heading}\n{self.text}" if self.heading else self.text


def split_passages(document: Document) -> list[Passage]:
    paged = document.kind == "PDF"
    passages: list[Passage] = []
    heading = ""
    for number, page in enumerate(document.pages, 1):
        gathered: list[str] = []

        def close() -> None:
            if gathered:
                passages.append(Passage(len(passages), number if paged else None, heading, "\n\n".join(gathered)))
                gathered.clear()

        for block in _blocks(page):
            title = _heading(block)
            if title:
                close()
                heading = title
            for piece in _pieces(block):
                if gathered and sum(map(len, gathered)) + len(piece) > PASSAGE_CHARACTERS:
                    close()
                gathered.append(piece)
        close()
    return passages


def _blocks(page: str) -> list[str]:
    """The page's paragraphs (text between blank lines; Word and PDF text has one per line, which
    the passages gather again), each heading line a block of its own."""
    blocks: list[str] = []
    for paragraph in re.split(r"\n\s*\n", page):
        lines: list[str] = []
        for line in paragraph.strip().splitlines():
            if _heading(line):
                blocks += ["\n".join(lines)] if lines else []
                blocks.append(line.strip())
                lines = []
            else:
                lines.append(line)
        blocks += ["\n".join(lines).strip()] if lines else []
    return [block for block in blocks if block]


def _heading(block: str) -> str:
    if "\n" in block:
        return ""
    found = _MARKDOWN_HEADING.match(block)
    if found:
        return found["title"].strip()
    return block.strip() if _NUMBERED_HEADING.match(block.strip()) else ""


def _pieces(block: str) -> list[str]:
    """The block in pieces of at most a passage's length, cut at sentence ends where it is longer."""
    if len(block) <= PASSAGE_CHARACTERS:
        return [block]
    pieces, current = [], ""
    for sentence in _SENTENCE_END.split(block):
        while len(sentence) > PASSAGE_CHARACTERS:
            cut = sentence.rfind(" ", 0, PASSAGE_CHARACTERS)
            cut = cut if cut > PASSAGE_CHARACTERS // 2 else PASSAGE_CHARACTERS
            pieces, current = _flushed(pieces, current), ""
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if current and len(current) + 1 + len(sentence) > PASSAGE_CHARACTERS:
            pieces, current = _flushed(pieces, current), ""
        current = f"{current} {sentence}".strip()
    return _flushed(pieces, current)


def _flushed(pieces: list[str], current: str) -> list[str]:
    return pieces + [current] if current else pieces
