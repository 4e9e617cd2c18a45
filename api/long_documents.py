"""Documents sent in a request that do not fit what is left of the model's context: answered
from their passages (library/fitting.py) in place of their text, kept in the library of the
login the request was made with (the page's too: the same user's), else of the client's address.
The response says the choice in its ``documents`` extension, and each reply's ``citations``
read its [n] back to the passages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engines import ChatModel, ChatRequest
from library.fitting import Room, choice_note, given_passages, numbered_by_document, passages_for_model
from library.retrieval import kept
from store import DocumentLibrary

from .media import EngineInput
from .schemas import DocumentReport


def fitted(engine_input: EngineInput, request: ChatRequest, model: ChatModel, library: DocumentLibrary, owner: str,
           build: Callable[[list[dict[str, Any]]], ChatRequest]) -> tuple[ChatRequest, list[DocumentReport]]:
    """``request`` as it is where its documents fit, else built again (``build``) from messages
    whose documents are the passages the last user message is most about. Slow (the model's
    counts, and embedding a document not kept before): call it off the event loop."""
    context, sent = model.context_length, engine_input.documents
    if context is None or not sent:
        return request, []
    counts = [model.count_tokens(document.text) for document in sent]
    total = model.count_prompt_tokens(request)
    max_new_tokens = int(request.generation.get("max_new_tokens") or model.generation_defaults.max_new_tokens)
    room = Room.of(context, max_new_tokens, total - sum(counts))
    if room.fits(sum(counts)):
        return request, []
    entries = [kept(library, owner, document.document) for document in sent]
    asked = engine_input.messages[max(document.message for document in sent)]["content"]
    for document in sent:
        asked = asked.replace(document.text, "")
    passages = given_passages(library, owner, entries, asked, room.budget, model.count_tokens)
    by_document = numbered_by_document(passages, [document.document.name for document in sent])
    messages = [dict(message) for message in engine_input.messages]
    reports = []
    for document, tokens in zip(sent, counts):
        given = by_document[document.document.name]
        framed = passages_for_model(document.document.name, given) if given else f"[{document.document.name}: no passage of it is about this message.]"
        messages[document.message]["content"] = messages[document.message]["content"].replace(document.text, framed)
        spent = sum(model.count_tokens(passage.text) for passage in given)
        reports.append(DocumentReport(name=document.document.name, tokens=tokens, tokens_left=room.left, passage_tokens=spent,
                                      passages=given, note=choice_note(document.document.name, tokens, sum(counts), room, given, spent)))
    return build(messages), reports
