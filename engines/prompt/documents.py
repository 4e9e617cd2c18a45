"""Documents read into text: PDF (text per page, with page numbers), Word (.docx: paragraphs and
tables, in their order) and text files (plain, Markdown, code, CSV, JSON, logs; encoding
detected). Their text goes into the message the model gets, named by file (and page), so they
reach every backend and every model: no processor is involved.

A document is refused, with its name, the problem and what to do, when it is encrypted, damaged,
a scan without a text layer, a zip bomb, binary data under a text name, or larger than the
server's limits (limits.py: max_document_pages, max_document_characters,
max_document_unpacked_size). Those limits are checked before the work they bound: the page count
before any page is read, the unpacked size of a Word file before it is unpacked, the characters
as they are extracted.

pypdf, pypdfium2, python-docx and charset-normalizer are imported when first needed.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Union

from ..errors import MediaError

# A path, or the file's bytes (then its name says what it is).
DocumentInput = Union[str, os.PathLike, bytes]

PDF_EXTENSIONS = (".pdf",)
WORD_EXTENSIONS = (".docx",)
TEXT_EXTENSIONS = (
    ".txt", ".text", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".ndjson", ".log", ".xml", ".yaml",
    ".yml", ".toml", ".ini", ".cfg", ".conf", ".env", ".html", ".htm", ".css", ".tex", ".srt", ".vtt", ".sql",
    ".py", ".ipynb", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs",
    ".go", ".rs", ".rb", ".php", ".swift", ".scala", ".r", ".jl", ".lua", ".pl", ".sh", ".bash", ".zsh", ".ps1",
    ".bat", ".m", ".hs", ".ex", ".exs", ".erl", ".clj", ".dart", ".vue", ".svelte", ".dockerfile", ".makefile",
)
DOCUMENT_EXTENSIONS = PDF_EXTENSIONS + WORD_EXTENSIONS + TEXT_EXTENSIONS
# Formats people try that we cannot read, and what to do instead.
_CONVERT = {
    ".doc": "the old Word format (.doc); save it as .docx (Word: File > Save As) and send that",
    ".rtf": "Rich Text; save it as .docx or .txt and send that",
    ".odt": "an OpenDocument text; save it as .docx or .pdf and send that",
    ".pages": "a Pages document; export it as .docx or .pdf and send that",
    ".xlsx": "a spreadsheet; save the sheet as .csv and send that",
    ".xls": "a spreadsheet; save the sheet as .csv and send that",
    ".pptx": "a presentation; export it as .pdf and send that",
}
_SEND = "Send a PDF, a Word file (.docx) or a text file."
# Control characters other than tab, newline, form feed and carriage return: text has almost none.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


class DocumentLimits(Protocol):
    """The server's limits on documents (declared in limits.py's Limits)."""

    max_document_pages: int
    max_document_characters: int
    max_document_unpacked_size: int


@dataclass(frozen=True)
class Document:
    """A document's text: one entry per page for a PDF (``""`` for a page with no text layer),
    one entry for anything else. ``kind``: "PDF", "Word" or "text"."""

    name: str
    kind: str
    pages: tuple[str, ...]

    @property
    def characters(self) -> int:
        return sum(len(page) for page in self.pages)

    def summary(self) -> str:
        """What the attachment chip says besides the name: "PDF, 3 pages", "text, 1,204 characters"."""
        if self.kind == "PDF":
            return f"PDF, {len(self.pages)} page{'s' if len(self.pages) != 1 else ''}"
        return f"{self.kind}, {self.characters:,} characters"

    def for_model(self) -> str:
        """The text as the model gets it: named by file, and by page for a PDF."""
        if self.kind != "PDF":
            return f"--- {self.name} ---\n{self.pages[0].strip()}\n--- end of {self.name} ---"
        total = len(self.pages)
        parts = [f"--- {self.name}, page {number} of {total} ---\n{text.strip() or '(no text on this page: an image only)'}"
                 for number, text in enumerate(self.pages, 1)]
        return "\n".join(parts) + f"\n--- end of {self.name} ---"


def is_document(name: str) -> bool:
    """Whether a file's name says it is a document this module reads (or one it can say how to convert)."""
    return name.lower().endswith(DOCUMENT_EXTENSIONS + tuple(_CONVERT))


def read_document(source: DocumentInput, name: str, limits: DocumentLimits) -> Document:
    """The text of the document at path ``source`` (or in bytes ``source``), called ``name`` in
    messages; a MediaError that names it and says what is wrong and what to do."""
    data = read_bytes(source, name)
    suffix = Path(name).suffix.lower()
    if suffix in _CONVERT:
        raise MediaError(f"{name} is {_CONVERT[suffix]}.")
    if suffix in PDF_EXTENSIONS or (data.startswith(b"%PDF-") and suffix not in WORD_EXTENSIONS):
        return Document(name, "PDF", _pdf_pages(data, name, limits))
    if suffix in WORD_EXTENSIONS:
        return Document(name, "Word", (_word_text(data, name, limits),))
    return Document(name, "text", (_text(data, name, limits),))


def read_bytes(source: DocumentInput, name: str) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        try:
            data = Path(source).read_bytes()
        except OSError:
            raise MediaError(f"{name} could not be read: the file is gone. Attach it again.") from None
    else:
        raise MediaError(f"{name} is a {type(source).__name__}; give a file path or the file's bytes.")
    if not data:
        raise MediaError(f"{name} is empty (0 bytes). Attach the file again.")
    return data


def _too_much_text(name: str, limits: DocumentLimits) -> MediaError:
    return MediaError(
        f"{name} holds more than {limits.max_document_characters:,} characters of text, more than this server reads from one "
        "document (the max_document_characters setting). Send the part you need."
    )


def _checked_length(text: str, name: str, limits: DocumentLimits) -> str:
    if len(text) > limits.max_document_characters:
        raise _too_much_text(name, limits)
    return text


# ---- PDF


def _pdf_pages(data: bytes, name: str, limits: DocumentLimits) -> tuple[str, ...]:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

    # PDFium counts pages some 250 times as fast as pypdf builds its page tree (bench/pdf_page_count.py),
    # so a PDF of too many pages is refused at once; pypdf, in Python, then reads the text of one within the limit.
    with open_pdf(data, name) as pdf:
        count = len(pdf)
    check_page_count(name, count, limits.max_document_pages, "max_document_pages")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise FileNotDecryptedError
        # pypdf's own count, which a page tree that PDFium repaired differently may make other.
        count = len(reader.pages)
    except (FileNotDecryptedError, DependencyError):
        # DependencyError: AES encryption whose cipher library is missing; the remedy is the same.
        raise password_protected(name) from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as error:
        raise damaged_pdf(name, error) from None
    check_page_count(name, count, limits.max_document_pages, "max_document_pages")
    pages: list[str] = []
    characters = 0
    for number in range(count):
        try:
            text = reader.pages[number].extract_text() or ""
        except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, ZeroDivisionError) as error:
            raise damaged_pdf(name, error, page=number + 1) from None
        characters += len(text)
        if characters > limits.max_document_characters:
            raise _too_much_text(name, limits)
        pages.append(text)
    if not any(page.strip() for page in pages):
        raise MediaError(
            f"{name} has no text layer: its {count} page{'s are' if count != 1 else ' is'} only images (a scan, or text "
            "turned into pictures), so there is no text to give the model. Run it through OCR (text recognition) first, "
            "or send the pages as images to a model that reads images."
        )
    return tuple(pages)


def open_pdf(data: bytes, name: str) -> Any:
    """The PDF in ``data`` opened with PDFium (pypdfium2), to close after use; a MediaError for
    one protected by a password or damaged beyond repair."""
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        raise (password_protected(name) if "password" in str(error).lower() else damaged_pdf(name, error)) from None


def password_protected(name: str) -> MediaError:
    return MediaError(
        f"{name} is protected by a password, so it cannot be read. Remove the protection "
        "(open it and print or save it as a new PDF without a password) and send that."
    )


def check_page_count(name: str, count: int, limit: int, setting: str) -> None:
    """A PDF's pages, before any is read: none, or more than ``limit`` (the ``setting``), is refused."""
    if count == 0:
        raise MediaError(f"{name} has no pages.")
    if count > limit:
        raise MediaError(
            f"{name} has {count:,} pages, more than the {limit:,} this server reads from one document "
            f"(the {setting} setting). Send only the pages you need (print them to a new PDF)."
        )


def damaged_pdf(name: str, error: BaseException, page: int | None = None) -> MediaError:
    reason = str(error).strip().rstrip(".")[:200] or type(error).__name__
    where = f" at page {page}" if page else ""
    return MediaError(f"{name} could not be read as a PDF{where} ({reason}): the file is damaged or not a PDF. Export or download it again.")


# ---- Word


def _word_text(data: bytes, name: str, limits: DocumentLimits) -> str:
    _check_unpacked_size(data, name, limits)
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        characters = 0
        for block in document.iter_inner_content():
            text = _table_text(block) if isinstance(block, Table) else block.text
            characters += len(text) + 1
            if characters > limits.max_document_characters:
                raise _too_much_text(name, limits)
            blocks.append(text)
    except MediaError:
        raise
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, TypeError, AttributeError, OSError) as error:
        reason = str(error).strip().rstrip(".")[:200] or type(error).__name__
        raise MediaError(f"{name} could not be read as a Word file ({reason}): the file is damaged or not a .docx. Save it again from Word.") from None
    return "\n".join(blocks)


def _check_unpacked_size(data: bytes, name: str, limits: DocumentLimits) -> None:
    """A .docx is a zip: what it unpacks to is refused before anything is unpacked when it comes
    to more than the limit (a zip bomb packs gigabytes into a few kilobytes). zipfile stops each
    member at the size its directory declares, so the declared sizes bound what is unpacked."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError):
        raise MediaError(f"{name} is not a Word file (.docx): it is not the zip archive every .docx is. Save it again from Word as .docx.") from None
    limit = limits.max_document_unpacked_size
    if unpacked > limit:
        raise MediaError(
            f"{name} unpacks to {unpacked / 2**20:,.1f} MB, more than the {limit / 2**20:,.1f} MB this server unpacks from one Word file "
            f"(the max_document_unpacked_size setting, a guard against zip bombs). Save its text as a .txt or .pdf and send that."
        )


def _table_text(table: Any) -> str:
    """A table as Markdown-like rows, its cells separated by " | "."""
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


# ---- text


def _text(data: bytes, name: str, limits: DocumentLimits) -> str:
    if len(data) > 4 * limits.max_document_characters:  # no encoding takes more than 4 bytes a character
        raise _too_much_text(name, limits)
    text = _decoded(data)
    if text is None or _looks_binary(text):
        raise MediaError(
            f"{name} is not a text file: it holds binary data, not text in any encoding. "
            f"If it is a document, send it with its own extension (.pdf, .docx). {_SEND}"
        )
    return _checked_length(text.removeprefix("\ufeff"), name, limits)


def _decoded(data: bytes) -> str | None:
    """The text in UTF-8 when it is (the common case, and fast), else in the encoding
    charset-normalizer finds; None when no encoding fits (binary data)."""
    if not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            if not _looks_binary(text):  # UTF-16 without its mark decodes as UTF-8 full of NULs
                return text
    from charset_normalizer import from_bytes

    results = from_bytes(data)
    best = results.best()
    if best is None:
        return None
    # Western text decodes equally well in several single-byte code pages (é is é in cp1252 and ŕ in
    # cp1250, and no measure tells them apart); cp1252, the web's reading of Latin-1, is the likeliest.
    tied = [match for match in results if (match.chaos, match.coherence) == (best.chaos, best.coherence)]
    return str(next((match for match in tied if "cp1252" in match.could_be_from_charset), best))


def _looks_binary(text: str) -> bool:
    """Control characters in more than 1% of the start: text has almost none, binary data many."""
    start = text[:65536]
    return len(_CONTROL.findall(start)) > 0.01 * len(start)
