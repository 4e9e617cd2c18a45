"""Documents attached in the page: read into text when attached (for the note) and sent (off the
event loop; the second read comes from a cache), and kept in its turn as the text the model gets, so that regenerating, saving and exporting
the chat never read the file again. Each shows as a chip that opens its text; before sending, the
note under the box says how many of the model's tokens the attachments take, and that a message
that cannot fit the model's context cannot be sent."""

from __future__ import annotations

import html
import os
import tempfile
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from engines import ChatError, ChatModel
from engines.model_files.model_args import MediaSettings
from engines.prompt.document_sandbox import ReadingLimits, read_bounded
from engines.prompt.documents import PDF_EXTENSIONS, Document, is_document
from engines.prompt.pdf_pages import pdf_page_images
from library.fitting import GivenPassage, passages_for_model
from limits import Limits

from .languages import said

# What the chip shows of a very long text: the model gets all of it, the page need not repaint it.
CHIP_CHARACTERS = 20_000
# Pages are rendered at the size images reach the model by default; the engine fits them to its own setting.
PAGE_PIXELS = MediaSettings.model_fields["image_max_pixels"].default
# Marks a chip among a message's parts, so an edit of the message keeps only its own text.
CHIP_CLASS = "document-chip"


class AttachedDocument(BaseModel):
    """A document as its turn keeps it: its name, what it is, and its text. One too long for the
    context (webui/long_documents.py) is answered from ``passages`` of it, found in its owner's
    library (``library_id``), and ``note`` says so in numbers; a later message's search of it has
    passages and no text. ``path`` (the page's copy of the file, to put it back in the box on
    Undo) is never saved or exported: a saved chat is the browser's to edit, and must not name
    files on the server."""

    name: str
    summary: str
    text: str
    library_id: str = ""
    passages: list[GivenPassage] = []
    note: str = ""
    path: str = Field("", exclude=True)

    def for_model(self) -> str:
        """What the model gets of it: its text, or the passages given in its place."""
        return passages_for_model(self.name, self.passages) if self.passages else self.text


def split_files(files: list[str], pdfs_as_images: bool = False) -> tuple[list[str], list[str], list[str]]:
    """The box's files as (media, documents, PDFs to send as page images: with ``pdfs_as_images``, every PDF)."""
    documents = [path for path in files if is_document(os.path.basename(path))]
    pdfs = [path for path in documents if path.lower().endswith(PDF_EXTENSIONS)] if pdfs_as_images else []
    return [path for path in files if path not in documents], [path for path in documents if path not in pdfs], pdfs


def page_images(paths: list[str], folder: str, limits: Limits) -> list[str]:
    """The pages of the PDFs at ``paths`` as PNG files in a fresh folder under ``folder`` (the
    page's upload storage, which keeps and expires them as it does uploads), in order."""
    written = []
    if paths:
        os.makedirs(folder, exist_ok=True)
    for path in paths:
        name = os.path.basename(path)
        images = pdf_page_images(path, name, limits, PAGE_PIXELS)
        out = tempfile.mkdtemp(prefix="anychat-pages-", dir=folder)
        for number, image in enumerate(images, 1):
            written.append(os.path.join(out, f"{Path(name).stem}-page-{number}.png"))
            image.save(written[-1])
    return written


def read_documents(paths: list[str], limits: Limits, user: str | None = None) -> list[AttachedDocument]:
    """The documents at ``paths`` (the page's uploads) of ``user``, read; a ChatError naming the first that cannot be."""
    documents = []
    for path in paths:
        document = read_upload(path, limits, user)
        documents.append(AttachedDocument(name=document.name, summary=document.summary(), text=document.for_model(), path=path))
    return documents


def read_upload(path: str, limits: Limits, user: str | None = None) -> Document:
    """The document at ``path`` (an upload of ``user``'s), read once however often it is asked for."""
    modified = os.path.getmtime(path) if os.path.exists(path) else 0.0
    return _read(path, modified, ReadingLimits.of(limits), user)


@lru_cache(maxsize=16)
def _read(path: str, modified: float, limits: ReadingLimits, user: str | None) -> Document:
    """An upload read once, though the note reads it as it is attached and the send again."""
    # Gradio keeps each upload in a folder of its own under the name it was given.
    return read_bounded(path, os.path.basename(path), limits, user)


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
