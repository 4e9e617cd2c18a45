"""Documents too long for what is left of the model's context, in a chat (library/fitting.py
makes the choice). Before a reply, the message's documents that do not fit are read into
passages and kept in the user's library (with progress shown, and Stop stops it), and the
passages the message is most about go to the model in their place; documents answered so from
earlier messages of the chat are searched again for each new question, and a question about a
whole document (library/whole_document.py) has all of it read, part by part. The note on each
document's chip says the choice in numbers; the reply's citations open the passages
(webui/chat_view.py, asked_passages)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from engines import ChatError, ChatModel
from engines.prompt.documents import Document
from library.embedder import Cancelled
from library.fitting import GivenPassage, Room, choice_note, given_passages, numbered_by_document
from library.retrieval import kept
from library.whole_document import LongDocumentSettings, read_whole, whole_note
from limits import Limits
from store import DocumentLibrary, LibraryEntry, StoreError
from tools import ToolCatalog, ToolSettings

from .documents import AttachedDocument, read_upload
from .session import ChatSession
from .turns import Turn, model_request

# How often the page hears how far reading a document into passages has got.
PROGRESS_SECONDS = 0.5


@dataclass(frozen=True)
class Reading:
    """How far a document of the message has been read before the reply: ``done`` of ``total``
    passages read into the library ("passages"; ``total`` 0 until counted), or parts noted for a
    question about the whole of it ("whole")."""

    kind: Literal["passages", "whole"]
    name: str
    done: int
    total: int


async def fit_documents(session: ChatSession, model: ChatModel, settings: dict[str, Any], limits: Limits,
                        user: str | None, catalog: ToolCatalog, long_documents: str = "auto") -> AsyncIterator[Reading]:
    """Fit the documents of the conversation's last user message to ``model``'s context, saying
    how far each is read while documents are read into passages (the prompt counted with the
    tools the chat runs, of ``catalog``); ``long_documents``: the chat's
    LongDocumentSettings choice, whether they are searched or read whole. Where one cannot be
    (stopped, past the user's quota, a choice that is none), the message's ``error`` says so and
    no reply is to be written."""
    keeper, context = session.keeper, model.context_length
    branch = session.tree.branch()
    asked = session.tree.messages[branch[-1]] if branch else None
    if keeper is None or context is None or asked is None or asked.role != "user":
        return
    library, owner = keeper.store.library, keeper.owner
    # Its own documents have their text; those searched again for it (from earlier messages) have none.
    mine = [document for document in asked.documents if document.text]
    earlier = _searched_before(session, mine) if asked.content.strip() else []
    if not mine and not earlier:
        return
    generation = {name: value for name, value in settings.items() if name != "chat_model"}
    counts = await asyncio.to_thread(lambda: [model.count_tokens(document.text) for document in mine])
    bare = asked.model_copy(update={"documents": []})
    before = await asyncio.to_thread(_prompt_tokens, model, [*session.turns[:-1], bare], generation, catalog)
    room = Room.of(context, int(generation.get("max_new_tokens") or model.generation_defaults.max_new_tokens), before)
    whole = room.fits(sum(counts))
    if whole and not earlier:
        return
    try:
        choice = LongDocumentSettings.build(long_documents=long_documents)
    except ChatError as error:
        asked.error = str(error)
        return
    entries: dict[str, LibraryEntry] = {}
    async for reading in _kept(session, library, owner, [] if whole else mine, limits, user, entries):
        yield reading
    if asked.error:
        return
    searched = [*(entries[document.name] for document in mine if document.name in entries), *(entry for entry, _ in earlier)]
    read_whole = choice.reads_whole(asked.content)
    by_document: dict[str, list[GivenPassage]] = {}
    if read_whole:
        async for reading in _noted(session, model, library, owner, searched, user, by_document):
            yield reading
        if asked.error:
            return
    else:
        passages = await asyncio.to_thread(given_passages, library, owner, searched, asked.content, room.budget, model.count_tokens)
        by_document = numbered_by_document(passages, [entry.name for entry in searched])
    documents = []
    for document, tokens in zip(mine, counts):
        entry = entries.get(document.name)
        if entry is None:
            documents.append(document)
            continue
        given = by_document[entry.name]
        spent = await asyncio.to_thread(lambda: sum(model.count_tokens(passage.text) for passage in given))
        note = whole_note(document.name, tokens, given) if read_whole else choice_note(document.name, tokens, sum(counts), room, given, spent)
        documents.append(document.model_copy(update={"library_id": entry.id, "passages": given, "note": note}))
    for entry, summary in earlier:
        given = by_document[entry.name]
        if given:
            again = f"read whole again for this message: {len(given)} part" if read_whole else f"searched again for this message: {len(given)} passage"
            documents.append(AttachedDocument(name=entry.name, summary=summary, text="", library_id=entry.id, passages=given,
                                              note=f"{entry.name}: {again}{'s' if len(given) != 1 else ''}"))
    asked.documents = documents


async def _kept(session: ChatSession, library: DocumentLibrary, owner: str, documents: list[AttachedDocument], limits: Limits,
                user: str | None, entries: dict[str, LibraryEntry]) -> AsyncIterator[Reading]:
    """Each of ``documents`` in the owner's library, by name in ``entries``: read into passages
    where it is not there yet, with progress shown; the message's error where it cannot be."""
    asked = session.turns[-1]
    for document in documents:
        if document.library_id:  # read into passages for this message before (it is answered again)
            entries[document.name] = LibraryEntry(document.library_id, document.name, document.summary, 0, 0.0)
            continue
        progress = {"done": 0, "total": 0}
        reading = asyncio.ensure_future(asyncio.to_thread(
            kept, library, owner, _document(document, limits, user), lambda done, total: progress.update(done=done, total=total),
            lambda: session.reply.stopping or session.left))
        # A document kept before is found at once, and shows no progress.
        while not (await asyncio.wait([reading], timeout=PROGRESS_SECONDS))[0]:
            yield Reading("passages", document.name, progress["done"], progress["total"])
        try:
            entries[document.name] = reading.result()
        except Cancelled:
            asked.error = f"Stopped while {document.name} was read into passages to search. Send it again to answer from it."
            return
        except (StoreError, ChatError) as error:
            asked.error = f"{document.name} is too long for the model's context, and could not be kept to answer from its passages: {error}"
            return


async def _noted(session: ChatSession, model: ChatModel, library: DocumentLibrary, owner: str, documents: list[LibraryEntry],
                 user: str | None, by_document: dict[str, list[GivenPassage]]) -> AsyncIterator[Reading]:
    """Each of ``documents`` read whole for the message's question about all of it
    (library/whole_document.py), what goes in its place by name in ``by_document``, numbered on
    from one document to the next, with progress shown; the message's error where it is stopped
    or cannot be."""
    asked = session.turns[-1]
    for entry in documents:
        first = 1 + sum(len(given) for given in by_document.values())
        try:
            async for reading in read_whole(model, library, owner, entry, asked.content, user,
                                            lambda: session.reply.stopping or session.left, first):
                by_document[entry.name] = reading.given
                if reading.parts:
                    yield Reading("whole", entry.name, reading.noted, reading.parts)
        except Cancelled:
            asked.error = f"Stopped while all of {entry.name} was read to answer about the whole of it. Send the message again to go on."
            return
        except ChatError as error:
            asked.error = f"All of {entry.name} could not be read to answer about the whole of it: {error}"
            return


def _searched_before(session: ChatSession, mine: list[AttachedDocument]) -> list[tuple[LibraryEntry, str]]:
    """The library documents earlier messages of the branch were answered from, each once, that
    the last message does not attach itself (``mine``)."""
    own = {document.library_id for document in mine}
    found: dict[str, tuple[LibraryEntry, str]] = {}
    for turn in session.turns[:-1]:
        for document in turn.documents if turn.role == "user" else []:
            if document.library_id and document.library_id not in own:
                found[document.library_id] = (LibraryEntry(document.library_id, document.name, document.summary, 0, 0.0), document.summary)
    return list(found.values())


def _document(attached: AttachedDocument, limits: Limits, user: str | None) -> Document:
    """The document with its pages, read again from the page's copy while it has one; else its text as one page."""
    try:
        return read_upload(attached.path, limits, user) if attached.path else Document(attached.name, "text", (attached.text,))
    except ChatError:
        return Document(attached.name, "text", (attached.text,))


def _prompt_tokens(model: ChatModel, turns: list[Turn], generation: dict[str, Any], catalog: ToolCatalog) -> int:
    tools, rest = ToolSettings.split(dict(generation), catalog)
    return model.count_prompt_tokens(model_request(turns, running=tuple(tools.tools(catalog).values()), **rest))
