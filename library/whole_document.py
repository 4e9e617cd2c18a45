"""Questions about a whole document ("how many functions", "list every section", "summarize it",
"compare the chapters"): the passages most like the question cannot answer them (a count over the
few passages found is wrong: LM Studio's issue 789), so every passage is read. In parts that fit
the context, the model writes down from each what bears on the question (map); the notes of all
the parts, numbered, then go to the model in the document's place, and it answers from them
(reduce), citing a part as it would a passage. Chosen by the question's words; Stop ends it
between parts."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence

from engines import ChatModel, ChatRequest
from store import FoundPassage

from .embedder import Cancelled
from .fitting import GivenPassage

# Words that ask about the whole rather than a place in it. "How many" alone is no sign ("how many
# days of leave do staff get" is answered in one place): it is where it asks what the document has.
_WHOLE = re.compile(
    r"\bhow (?:many|often)\b.*\b(?:are there|in (?:the|this|it|all)\b|does (?:it|the \w+|this \w+) (?:have|contain|define|list|include|mention))"
    r"|\bcount (?:the|all|every|how)\b|\blist (?:all|every|each)\b|\b(?:every|each) (?:section|chapter|page|function|class|item|part|time)s?\b"
    r"|\bsummari[sz]e\b|\bsummary\b|\boverview\b|\boutline\b|\bcompare\b|\bwhole\b|\bentire\b|\boverall\b|\bthroughout\b",
    re.IGNORECASE)
# What a part's note may take: enough for a list or a few facts, small beside the parts' text.
NOTE_TOKENS = 128
NOTHING = "NONE"


def asks_about_the_whole(question: str) -> bool:
    return bool(_WHOLE.search(question))


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


def whole_note(name: str, tokens: int, noted: int) -> str:
    """What the page says of a document read whole for a question about all of it."""
    return f"{name}: {tokens:,} tokens, read whole for a question about all of it: the notes of its {noted} part{'s' if noted != 1 else ''} sent"
