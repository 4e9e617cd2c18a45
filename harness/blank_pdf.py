"""A PDF of blank pages, as many as asked, for the tests and the benchmark that refuse long PDFs."""

from __future__ import annotations

import io


def blank_pdf(pages: int) -> bytes:
    """``pages`` blank letter-size pages, written by pypdf (thousands take a second)."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
