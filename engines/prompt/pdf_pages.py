"""A PDF's pages as pictures, for models that read images: a scan has no text to read, and a
page's layout, figures and tables say more as a picture. pypdfium2 renders each page at about the
size the model takes its images; a PDF of more pages than max_document_page_images is refused
before any page is rendered, rather than cut.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from .documents import DocumentInput, check_page_count, open_pdf, read_bytes

# A page is rendered at most this many times its size in points (72 per inch): 288 dpi.
_MOST_SCALE = 4.0


class PageImageLimits(Protocol):
    """The server's limit on page images (declared in limits.py's Limits)."""

    max_document_page_images: int


def pdf_page_images(source: DocumentInput, name: str, limits: PageImageLimits, max_pixels: int) -> list[Any]:
    """The pages of the PDF at path ``source`` (or in bytes ``source``) as RGB PIL images of
    about ``max_pixels`` pixels each; a MediaError that names it and says what is wrong."""
    with open_pdf(read_bytes(source, name), name) as pdf:
        check_page_count(name, len(pdf), limits.max_document_page_images, "max_document_page_images")
        images = []
        for page in pdf:
            width, height = page.get_size()
            scale = min(_MOST_SCALE, math.sqrt(max_pixels / max(1.0, width * height)))
            images.append(page.render(scale=scale).to_pil().convert("RGB"))
            page.close()
    return images
