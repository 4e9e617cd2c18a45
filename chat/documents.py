"""Documents attached to a message: read into text once, off the event loop (a second read of
the same upload comes from a cache), and kept in their turn as the text the model gets, so that
regenerating, saving and exporting a chat never read the file again. PDFs may go to a model that
reads images as their pages instead."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field

from engines.model_files.model_args import MediaSettings
from engines.prompt.document_sandbox import ReadingLimits, read_bounded
from engines.prompt.documents import PDF_EXTENSIONS, Document, is_document
from engines.prompt.pdf_pages import pdf_page_images
from library.fitting import GivenPassage, passages_for_model
from limits import Limits

# Pages are rendered at the size images reach the model by default; the engine fits them to its own setting.
PAGE_PIXELS = MediaSettings.model_fields["image_max_pixels"].default


class AttachedDocument(BaseModel):
    """A document as its turn keeps it: its name, what it is, and its text. One too long for the
    context (chat/long_documents.py) is answered from ``passages`` of it, found in its owner's
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
