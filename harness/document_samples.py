"""Real documents made by the tests: PDFs written by hand (a text layer per page, or a page with
only an image), Word files made with python-docx, text in several encodings, and broken ones."""

from __future__ import annotations

import io
import zipfile
import zlib


def pdf_bytes(pages: list[str | None]) -> bytes:
    """A PDF with one page per entry: its text drawn with Helvetica (one line per text line), or,
    for None, a page holding only a picture (a scan's page: no text layer)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in once the page tree's number is known
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    pixels = zlib.compress(bytes([200, 120, 40]) * 64 * 64)
    image = add(b"<< /Type /XObject /Subtype /Image /Width 64 /Height 64 /ColorSpace /DeviceRGB /BitsPerComponent 8 "
                b"/Filter /FlateDecode /Length %d >>\nstream\n" % len(pixels) + pixels + b"\nendstream")
    kids = []
    for text in pages:
        if text is None:
            stream = b"q 400 0 0 400 100 300 cm /Im1 Do Q"
        else:
            lines = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in text.split("\n")]
            shown = b" T* ".join(b"(" + line.encode("latin-1") + b") Tj" for line in lines)
            stream = b"BT /F1 12 Tf 14 TL 72 720 Td " + shown + b" ET"
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                        b"/Resources << /Font << /F1 %d 0 R >> /XObject << /Im1 %d 0 R >> >> >>" % (tree, content, font, image)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % kid for kid in kids), len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref))
    return out.getvalue()


def encrypted_pdf_bytes(text: str, password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([text]))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None, after: list[str] = ()) -> bytes:
    """A Word file: ``paragraphs``, then ``table`` (rows of cells), then ``after``."""
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, cells in zip(grid.rows, table):
            for cell, text in zip(row.cells, cells):
                cell.text = text
    for text in after:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bomb_docx_bytes(unpacked: int) -> bytes:
    """A real Word file with one more member of ``unpacked`` zero bytes, which deflate packs to a
    thousandth of that."""
    out = io.BytesIO(docx_bytes(["A harmless looking letter."]))
    with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED) as archive, archive.open("word/media/zeros.bin", "w", force_zip64=True) as member:
        block = bytes(2**20)
        for _ in range(unpacked // len(block)):
            member.write(block)
    return out.getvalue()


LATIN_TEXT = ("Le café de la gare ouvre à six heures. Les élèves étrangers y goûtent des crêpes "
              "et des gâteaux à la crème, près de la fenêtre où l'on voit la forêt.\n") * 3
