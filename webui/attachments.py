"""Documents in the page: each shows in its message as a chip that opens its text; before
sending, the note under the box says how many of the model's tokens the attachments take, and that
a message that cannot fit the model's context cannot be sent (reading them: chat/documents.py)."""

from __future__ import annotations

import html
import weakref
from typing import Any

from chat.documents import AttachedDocument, read_documents
from engines import ChatError, ChatModel
from limits import Limits

from .languages import said

# What the chip shows of a very long text: the model gets all of it, the page need not repaint it.
CHIP_CHARACTERS = 20_000
# Marks a chip among a message's parts, so an edit of the message keeps only its own text.
CHIP_CLASS = "document-chip"


# Each model's counts of the documents last shown, dropped with the model (an unloaded model's
# memory must not be held here).
_counted: weakref.WeakKeyDictionary[ChatModel, dict[str, int]] = weakref.WeakKeyDictionary()


def _tokens(model: ChatModel, text: str) -> int:
    counts = _counted.setdefault(model, {})
    if text not in counts:
        if len(counts) >= 16:
            counts.clear()
        counts[text] = model.count_tokens(text)
    return counts[text]


def chip(document: AttachedDocument) -> str:
    """The document in the conversation: its name and what it is, opening to what the model gets of
    it (its text, or the passages given in its place). One line of HTML (newlines as entities), so
    that Markdown takes it whole, blank lines in the text included."""
    given = document.for_model()
    shown = given[:CHIP_CHARACTERS]
    more = f"\n… (the first {CHIP_CHARACTERS:,} of {len(given):,} characters shown; the model gets all)" if shown != given else ""
    text = html.escape(shown + more).replace("\n", "&#10;")
    note = f" · {html.escape(document.note.removeprefix(document.name + ': '))}" if document.note else ""
    return (f'<details class="{CHIP_CLASS}"><summary>📄 {html.escape(document.name)} · {html.escape(document.summary)}{note}</summary>'
            f"<pre>{text}</pre></details>")


def is_chip(part: Any) -> bool:
    return isinstance(part, str) and part.startswith(f'<details class="{CHIP_CLASS}"')


def tokens_note(model: ChatModel | None, paths: list[str], conversation: str, limits: Limits, user: str | None = None,
                searchable: bool = False) -> str:
    """What the note under the box says of ``user``'s documents in it: each one's tokens in
    ``model``'s own tokenizer and, against the model's context, whether the message can be sent
    after ``conversation`` (the prompt so far, as the model would get it), or, ``searchable`` (the
    chat is kept, so documents can go into the user's library), that its passages will be sent
    in their place. Empty without documents."""
    if not paths:
        return ""
    try:
        documents = read_documents(paths, limits, user)
    except ChatError as error:
        return f"⚠ {error}"
    if model is None:
        return said("attachments.no_model", listed=" · ".join(f"{d.name} ({d.summary})" for d in documents))
    counts = [_tokens(model, document.text) for document in documents]
    listed = " · ".join(said("attachments.document", name=d.name, summary=d.summary, count=f"{count:,}") for d, count in zip(documents, counts))
    attached = sum(counts)
    context = model.context_length
    if context is None:
        return f"📎 {listed}."
    before = model.count_tokens(conversation) if conversation else 0
    numbers = {"listed": listed, "attached": f"{attached:,}", "before": f"{before:,}", "total": f"{attached + before:,}", "context": f"{context:,}"}
    so_far = said("attachments.so_far", **numbers) if before else ""
    if attached + before >= context:
        return said("attachments.to_passages" if searchable else "attachments.too_long", so_far=so_far, **numbers)
    return said("attachments.with_conversation" if before else "attachments.together", **numbers)
