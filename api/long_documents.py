"""Documents sent in a request that do not fit what is left of the model's context: answered
from their passages (library/fitting.py) in place of their text, or, for a question about the
whole of a document, from its outline and the notes of all its parts (library/whole_document.py);
kept in the library of the login the request was made with (the page's too: the same user's),
else of the client's address. The response says the choice in its ``documents`` extension, and
each reply's ``citations`` read its [n] back to the passages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from engines import ChatModel, ChatRequest
from library.fitting import GivenPassage, Room, choice_note, given_passages, numbered_by_document, passages_for_model
from library.retrieval import kept
from library.whole_document import LongDocumentSettings, read_whole, whole_note
from store import DocumentLibrary, LibraryEntry

from .media import EngineInput
from .schemas import DocumentReport


async def fitted(engine_input: EngineInput, request: ChatRequest, model: ChatModel, library: DocumentLibrary, owner: str,
                 build: Callable[[list[dict[str, Any]]], ChatRequest],
                 choice: LongDocumentSettings = LongDocumentSettings()) -> tuple[ChatRequest, list[DocumentReport]]:
    """``request`` as it is where its documents fit, else built again (``build``) from messages
    whose documents are the passages the last user message is most about, or what reading each
    whole gave where it asks about the whole (or ``choice`` says so: the request's
    ``long_documents``). Cancelling it stops reading between parts."""
    context, sent = model.context_length, engine_input.documents
    if context is None or not sent:
        return request, []
    counts = await asyncio.to_thread(lambda: [model.count_tokens(document.text) for document in sent])
    total = await asyncio.to_thread(model.count_prompt_tokens, request)
    max_new_tokens = int(request.generation.get("max_new_tokens") or model.generation_defaults.max_new_tokens)
    room = Room.of(context, max_new_tokens, total - sum(counts))
    if room.fits(sum(counts)):
        return request, []
    entries = [await asyncio.to_thread(kept, library, owner, document.document) for document in sent]
    asked = engine_input.messages[max(document.message for document in sent)]["content"]
    for document in sent:
        asked = asked.replace(document.text, "")
    whole = choice.reads_whole(asked)
    if whole:
        by_document = await _read_whole(model, library, owner, entries, asked, request.user)
    else:
        passages = await asyncio.to_thread(given_passages, library, owner, entries, asked, room.budget, model.count_tokens)
        by_document = numbered_by_document(passages, [document.document.name for document in sent])
    messages = [dict(message) for message in engine_input.messages]
    reports = []
    for document, tokens in zip(sent, counts):
        name = document.document.name
        given = by_document[name]
        framed = passages_for_model(name, given) if given else f"[{name}: no passage of it is about this message.]"
        messages[document.message]["content"] = messages[document.message]["content"].replace(document.text, framed)
        spent = await asyncio.to_thread(lambda: sum(model.count_tokens(passage.text) for passage in given))
        note = whole_note(name, tokens, given) if whole else choice_note(name, tokens, sum(counts), room, given, spent)
        reports.append(DocumentReport(name=name, tokens=tokens, tokens_left=room.left, passage_tokens=spent, passages=given,
                                      read_whole=whole, note=note))
    return build(messages), reports


async def _read_whole(model: ChatModel, library: DocumentLibrary, owner: str, entries: list[LibraryEntry], question: str,
                      user: str | None) -> dict[str, list[GivenPassage]]:
    """What goes in each document's place for a question about the whole of it, numbered on from one to the next."""
    by_document: dict[str, list[GivenPassage]] = {}
    for entry in entries:
        first = 1 + sum(len(given) for given in by_document.values())
        async for reading in read_whole(model, library, owner, entry, question, user, lambda: False, first):
            by_document[entry.name] = reading.given
    return by_document
