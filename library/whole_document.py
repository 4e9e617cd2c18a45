"""Questions about a whole document ("how many functions", "list every section", "summarize it",
"compare the chapters"): the passages most like the question cannot answer them (a count over the
few passages found is wrong: LM Studio's issue 789), so every passage is read. In parts that fit
the context, the model writes down from each what bears on the question (map); the notes of all
the parts, numbered, then go to the model in the document's place, and it answers from them
(reduce), citing a part as it would a passage. Before the notes goes what the server counts
itself (outline.py: a code file's functions and classes, a document's sections), which a small
model would count wrong; where the question asks only that ("how many functions"), the outline
alone. Chosen by the question's words, or by hand (LongDocumentSettings); Stop ends it between parts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from engines import ChatModel, ChatRequest
from engines.settings import Settings, page_control
from store import DocumentLibrary, FoundPassage, LibraryEntry

from .embedder import Cancelled
from .fitting import GivenPassage
from .outline import Outline, outline

# Words that ask about the whole rather than a place in it. "How many" alone is no sign ("how many
# days of leave do staff get" is answered in one place): it is where it asks what the document has.
_WHOLE = re.compile(
    r"\bhow (?:many|often)\b.*\b(?:are there|in (?:the|this|it|all)\b|does (?:it|the \w+|this \w+|[\w-]+\.\w+) (?:have|contain|define|list|include|mention))"
    r"|\bcount (?:the|all|every|how)\b|\blist (?:all|every|each)\b|\b(?:every|each) (?:section|chapter|page|function|class|item|part|time)s?\b"
    r"|\bsummari[sz]e\b|\bsummary\b|\boverview\b|\boutline\b|\bcompare\b|\bwhole\b|\bentire\b|\boverall\b|\bthroughout\b",
    re.IGNORECASE)
# What a part's note may take: enough for a list or a few facts, small beside the parts' text.
NOTE_TOKENS = 128
NOTHING = "NONE"
OUTLINE_HEADING = "outline, counted by the server"


LongDocuments = Literal["auto", "search", "whole"]


def asks_about_the_whole(question: str) -> bool:
    return bool(_WHOLE.search(question))


class LongDocumentSettings(Settings):
    """How a question is answered from documents longer than the context: one setting, from which
    the page's control and the API's field are built. The question's words choose where they can;
    the hand choice is for where they choose wrong (a summary asked in words the pattern misses, a
    "how many" that is about one place after all)."""

    kind = "long documents"

    long_documents: LongDocuments = Field(
        "auto", description="how a question about documents longer than the context is answered: auto (the question's words "
                            "choose), search (from the passages most about it) or whole (every part of each read: its outline "
                            "and the model's notes of all its parts)",
        json_schema_extra=page_control("Long documents", elem_id="long-documents",
                                       info="auto: the question's words choose; search: the passages most about the question; "
                                            "whole: every part read, for a summary, a list or a count"),
    )

    def reads_whole(self, question: str) -> bool:
        """Whether ``question`` is answered from the whole of each document rather than its passages found."""
        return self.long_documents == "whole" or (self.long_documents == "auto" and asks_about_the_whole(question))


def parts(passages: Sequence[FoundPassage], room: int, count_tokens: Callable[[str], int]) -> list[list[FoundPassage]]:
    """The passages, in order, in parts of at most ``room`` tokens each (one passage at least)."""
    grouped: list[list[FoundPassage]] = [[]]
    spent = 0
    for passage in passages:
        tokens = count_tokens(passage.text)
        if grouped[-1] and spent + tokens > room:
            grouped.append([])
            spent = 0
        grouped[-1].append(passage)
        spent += tokens
    return [part for part in grouped if part]


def outline_passage(found: Outline, number: int) -> GivenPassage:
    """The document's outline as the passage given under ``number``."""
    return GivenPassage(number=number, name=found.name, heading=OUTLINE_HEADING, text=found.for_model())


@dataclass
class Reading:
    """How far reading a whole document has got: ``given``, what goes in its place so far (its
    outline, then a note a part); ``noted`` of its ``parts`` (none where the outline answers)."""

    given: list[GivenPassage] = field(default_factory=list)
    noted: int = 0
    parts: int = 0


async def read_whole(model: ChatModel, library: DocumentLibrary, owner: str, document: LibraryEntry, question: str,
                     user: str | None, cancelled: Callable[[], bool], first: int = 1) -> AsyncIterator[Reading]:
    """``document`` read whole for ``question``, its passages numbered from ``first``: the reading
    after its outline and after each part's note (the last one is the whole); Cancelled where
    ``cancelled`` says so before a part."""
    in_order = await asyncio.to_thread(library.in_order, owner, document.id)
    found = await asyncio.to_thread(outline, document.name, in_order)
    reading = Reading([outline_passage(found, first)] if found else [])
    if found and found.answers(question):
        yield reading
        return
    part_room = max(256, (model.context_length - NOTE_TOKENS) // 2)
    split = await asyncio.to_thread(parts, in_order, part_room, model.count_tokens)
    reading.parts = len(split)
    yield reading
    async for note in notes(model, document.name, question, split, user, cancelled, first + len(reading.given)):
        reading.given.append(note)
        reading.noted += 1
        yield reading


async def notes(model: ChatModel, name: str, question: str, document_parts: list[list[FoundPassage]], user: str | None,
                cancelled: Callable[[], bool], first: int = 1) -> AsyncIterator[GivenPassage]:
    """What the model noted from each part of the document for ``question``, a part at a time,
    each as a passage numbered from ``first`` (its text the note, its heading which part and pages
    it covers); Cancelled where ``cancelled`` says so before a part."""
    total = len(document_parts)
    for index, part in enumerate(document_parts):
        if cancelled():
            raise Cancelled
        text = "\n\n".join(passage.text for passage in part)
        asked = (f"Here is part {index + 1} of {total} of the document {name}:\n\n{text}\n\n"
                 f"From this part only, write down briefly everything in it that helps answer this question (every item, "
                 f"if the question asks for a list or a count): {question}\nIf nothing in this part does, write {NOTHING}.")
        [reply] = await model.achat(ChatRequest.build([{"role": "user", "content": asked}], user=user, temperature=0,
                                                      max_new_tokens=NOTE_TOKENS))
        pages = sorted({passage.page for passage in part if passage.page is not None})
        where = f", pages {pages[0]}-{pages[-1]}" if len(pages) > 1 else f", page {pages[0]}" if pages else ""
        yield GivenPassage(number=first + index, name=name, page=pages[0] if pages else None,
                           heading=f"part {index + 1} of {total}{where}", text=reply.parts.content.strip() or NOTHING)


def whole_note(name: str, tokens: int, given: Sequence[GivenPassage]) -> str:
    """What the page says of a document read whole for a question about all of it, ``given`` in its place."""
    noted = sum(passage.heading != OUTLINE_HEADING for passage in given)
    if given and not noted:
        return f"{name}: {tokens:,} tokens, read whole for a question about all of it: its outline sent, which counts what the question asks"
    outline = "its outline and " if len(given) > noted else ""
    return (f"{name}: {tokens:,} tokens, read whole for a question about all of it: {outline}the notes of its {noted} "
            f"part{'s' if noted != 1 else ''} sent")
