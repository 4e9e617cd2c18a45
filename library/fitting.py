"""The choice for a message's documents, said in numbers: where they fit what is left of the
context beside the conversation and the reply, they go in whole; where they do not, the passages
the message is most about go in their place, numbered for the model to cite, as many as a share
of the context holds ("report.pdf: 85,000 tokens > 6,000 left: answered from 6 passages, 2,100
tokens"). Never a refusal for size alone: the documents' own limits (limits.py) still hold."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from engines.compaction import REPLY_SHARE
from store import DocumentLibrary, LibraryEntry

from .retrieval import search

# The passages take what is left beside the conversation, at least the first share of the room
# beside the reply (compaction makes the conversation smaller to leave it) and at most the second,
# so that the turns after this one still fit.
LEAST_SHARE = 0.3
MOST_SHARE = 0.5
# Passages of library/passages.py are about 200 tokens: more are fetched than fit, then cut to the budget.
TYPICAL_PASSAGE_TOKENS = 150
CITE = "Answer from these passages, and cite each one you use by its number in brackets, like [1]."


class GivenPassage(BaseModel):
    """A passage as the model was given it, under ``number``; kept in its turn, so that the reply's
    citations open it. ``page``: the PDF page (None for other formats)."""

    number: int
    name: str
    page: int | None = None
    heading: str = ""
    text: str

    def label(self) -> str:
        """Where it is: "manual.pdf, page 12 · 3.2 Warranty"."""
        page = f", page {self.page}" if self.page is not None else ""
        heading = f" · {self.heading}" if self.heading else ""
        return f"{self.name}{page}{heading}"


@dataclass(frozen=True)
class Room:
    """What is left of the context for a message's documents: ``context`` less the reply's room
    and the prompt ``before`` them (the conversation and the message's own text)."""

    context: int
    reply: int
    before: int

    @classmethod
    def of(cls, context: int, max_new_tokens: int, before: int) -> Room:
        return cls(context, min(max_new_tokens, int(context * REPLY_SHARE)), before)

    @property
    def left(self) -> int:
        return max(0, self.context - self.reply - self.before)

    def fits(self, tokens: int) -> bool:
        return tokens <= self.left

    @property
    def budget(self) -> int:
        room = self.context - self.reply
        return int(min(room * MOST_SHARE, max(self.left, room * LEAST_SHARE)))


def given_passages(library: DocumentLibrary, owner: str, documents: Sequence[LibraryEntry], question: str, budget: int,
                   count_tokens: Callable[[str], int]) -> list[GivenPassage]:
    """The passages of ``documents`` that ``question`` is most about, best first, as many as
    ``budget`` tokens hold (one at least), numbered from 1. A message with no words to search by
    gets each document's opening passages."""
    wanted = max(2, budget // TYPICAL_PASSAGE_TOKENS + 2)
    if question.strip():
        found = search(library, owner, [document.id for document in documents], question, wanted)
    else:
        found = [passage for document in documents for passage in library.in_order(owner, document.id, wanted // len(documents) + 1)]
    given: list[GivenPassage] = []
    spent = 0
    for passage in found:
        tokens = count_tokens(passage.text) + 12  # its label and number
        if given and spent + tokens > budget:
            break
        spent += tokens
        given.append(GivenPassage(number=1 + len(given), name=passage.name, page=passage.page, heading=passage.heading, text=passage.text))
    return given


def numbered_by_document(passages: Sequence[GivenPassage], names: Sequence[str]) -> dict[str, list[GivenPassage]]:
    """The passages grouped by document, in the order of ``names`` (best first within each), and
    numbered again from 1 in that order: the model reads them so, [1] first."""
    grouped: dict[str, list[GivenPassage]] = {}
    number = 1
    for name in dict.fromkeys(names):
        grouped[name] = [passage.model_copy(update={"number": number + index})
                         for index, passage in enumerate(passage for passage in passages if passage.name == name)]
        number += len(grouped[name])
    return grouped


def passages_for_model(name: str, passages: Sequence[GivenPassage]) -> str:
    """The passages of one document as the model reads them, framed as a document is (so that
    compaction cuts them to a note like one)."""
    span = f"[{passages[0].number}]-[{passages[-1].number}]" if len(passages) > 1 else f"[{passages[0].number}]"
    frame = f"{name}: passages {span}"
    body = "\n\n".join(f"[{passage.number}] ({passage.label()})\n{passage.text}" for passage in passages)
    return f"--- {frame} ---\n{body}\n--- end of {frame} ---\n{CITE}"


def choice_note(name: str, tokens: int, together: int, room: Room, passages: Sequence[GivenPassage], passage_tokens: int) -> str:
    """What the page and the API say of the choice for one document of ``tokens``, sent with
    others of ``together`` tokens in all (itself included)."""
    count = len(passages)
    size = f"{tokens:,} tokens" if together == tokens else f"{tokens:,} tokens ({together:,} with the other documents)"
    return (f"{name}: {size} > {room.left:,} left in the context: answered from {count} passage{'s' if count != 1 else ''}, "
            f"{passage_tokens:,} tokens")
