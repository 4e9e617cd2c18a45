"""Documents read into text (engines/prompt/documents.py), on real files made by the tests."""

from __future__ import annotations

import json
import time

import pytest

from engines import MediaError
from harness.blank_pdf import blank_pdf
from engines.prompt.documents import is_document, read_document
from engines.prompt.pdf_pages import pdf_page_images
from limits import Limits

from harness.document_samples import (
    LATIN_TEXT,
    docx_bytes,
    encrypted_pdf_bytes,
    pdf_bytes,
    zip_bomb_docx_bytes,
)

LIMITS = Limits()


def test_pdf_text_per_page_with_page_numbers_and_an_image_only_page(tmp_path):
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf_bytes(["Quarterly report\nRevenue grew by 12 percent.", None, "The third page (last)."]))
    document = read_document(path, "report.pdf", LIMITS)
    assert document.kind == "PDF" and len(document.pages) == 3
    assert "Revenue grew by 12 percent." in document.pages[0]
    assert document.pages[1].strip() == ""
    assert document.summary() == "PDF, 3 pages"
    text = document.for_model()
    assert "--- report.pdf, page 1 of 3 ---\nQuarterly report\nRevenue grew by 12 percent." in text
    assert "--- report.pdf, page 2 of 3 ---\n(no text on this page: an image only)" in text
    assert "--- report.pdf, page 3 of 3 ---\nThe third page (last)." in text
    assert text.endswith("--- end of report.pdf ---")


def test_docx_paragraphs_and_table_in_their_order():
    data = docx_bytes(["Meeting notes", "Budget approved."], [["Item", "Cost"], ["Chairs", "120"]], after=["Next meeting Friday."])
    document = read_document(data, "notes.docx", LIMITS)
    assert document.kind == "Word"
    assert document.pages[0].split("\n") == ["Meeting notes", "Budget approved.", "| Item | Cost |",
                                             "| Chairs | 120 |", "Next meeting Friday."]
    assert document.for_model().startswith("--- notes.docx ---\nMeeting notes\n")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "latin-1"])
def test_text_in_several_encodings(encoding):
    document = read_document(LATIN_TEXT.encode(encoding), "cafe.txt", LIMITS)
    assert document.pages[0] == LATIN_TEXT
    assert document.kind == "text"


def test_code_csv_json_and_markdown_are_text():
    for name, text in [("main.py", "def f():\n    return 1\n"), ("data.csv", "a,b\n1,2\n"),
                       ("x.json", json.dumps({"k": [1, 2]})), ("README.md", "# Title\n\nBody"), ("app.log", "INFO start\n")]:
        assert read_document(text.encode(), name, LIMITS).pages[0] == text
        assert is_document(name)
    assert not is_document("photo.png")


@pytest.mark.parametrize(("name", "data", "says"), [
    ("secret.pdf", encrypted_pdf_bytes("Hidden words"), "protected by a password"),
    ("scan.pdf", pdf_bytes([None, None]), "no text layer: its 2 pages are only images"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj <<< garbage", "could not be read as a PDF"),
    ("broken.pdf", pdf_bytes(["Some text"])[:120], "could not be read as a PDF"),
    ("broken.docx", b"PK\x03\x04 not really a zip", "is not a Word file (.docx)"),
    ("photo.txt", bytes(range(256)) * 64, "is not a text file: it holds binary data"),
    ("old.doc", b"\xd0\xcf\x11\xe0 old word", "the old Word format (.doc); save it as .docx"),
    ("empty.txt", b"", "is empty (0 bytes)"),
])
def test_bad_documents_are_refused_naming_the_file_and_the_problem(name, data, says):
    with pytest.raises(MediaError) as refused:
        read_document(data, name, LIMITS)
    assert name in str(refused.value) and says in str(refused.value)


def test_a_docx_zip_bomb_is_refused_before_it_is_unpacked():
    bomb = zip_bomb_docx_bytes(64 * 2**20)
    assert len(bomb) < 2**20  # 64 MiB of zeros packed into well under 1 MiB
    started = time.monotonic()
    with pytest.raises(MediaError, match=r"bomb.docx unpacks to 64\.\d MB, more than the 16\.0 MB .*max_document_unpacked_size"):
        read_document(bomb, "bomb.docx", Limits(max_document_unpacked_size=16 * 2**20))
    assert time.monotonic() - started < 1


def test_thousands_of_pages_are_refused_before_any_page_is_read():
    data = blank_pdf(3000)
    started = time.monotonic()
    with pytest.raises(MediaError, match=r"huge.pdf has 3,000 pages, more than the 1,000 .*max_document_pages"):
        read_document(data, "huge.pdf", LIMITS)
    assert time.monotonic() - started < 1


def test_text_over_the_character_limit_is_refused_not_cut():
    limits = Limits(max_document_characters=1000)
    with pytest.raises(MediaError, match="long.txt holds more than 1,000 characters"):
        read_document(b"word " * 300, "long.txt", limits)
    with pytest.raises(MediaError, match="long.pdf holds more than 1,000 characters"):
        read_document(pdf_bytes(["x" * 600, "y" * 600]), "long.pdf", limits)
    with pytest.raises(MediaError, match="long.docx holds more than 1,000 characters"):
        read_document(docx_bytes(["z" * 600, "w" * 600]), "long.docx", limits)


def test_pdf_pages_render_as_images_and_bad_pdfs_are_refused():
    [text_page, picture_page] = pdf_page_images(pdf_bytes(["Hello", None]), "two.pdf", LIMITS, max_pixels=200 * 260)
    assert text_page.mode == "RGB" and 0.9 < text_page.width * text_page.height / (200 * 260) < 1.05
    assert picture_page.getpixel((picture_page.width // 2, picture_page.height // 2)) == (200, 120, 40)
    for data, says in [(encrypted_pdf_bytes("Hidden"), "locked.pdf is protected by a password"),
                       (b"%PDF-1.4\n1 0 obj <<< garbage", "locked.pdf could not be read as a PDF"),
                       (blank_pdf(20), "locked.pdf has 20 pages, more than the 16 .* max_document_page_images")]:
        with pytest.raises(MediaError, match=says):
            pdf_page_images(data, "locked.pdf", LIMITS, max_pixels=10_000)
