"""Document bombs, sent the way an attacker sends them: through /v1 and the page's message box of
`python app.py --backend huggingface` on the real default model (served in the test process:
harness/app_in_process.py), with a second user chatting meanwhile.

- a PDF of 10 KB whose pages share one content stream of 3.8 MB: pypdf spends 5 s of pure-Python
  work on each page (1.5-2 hours over a thousand pages, which no thread can be made to stop);
- a .docx of 60 KB holding three million empty paragraphs, which python-docx builds into a tree
  of gigabytes.

Each is read in a process of its own (engines/prompt/document_sandbox.py), stopped at the
server's limits (lowered here so that a test takes seconds), and refused in words; the other
user is answered within seconds meanwhile, and the server's memory stays where it was.
"""

from __future__ import annotations

import base64
import io
import zipfile

import psutil
import pytest

from harness.app_in_process import AppInProcess
from tests.page_client import NO_TOOLS, PageClient, error, file_data
from tests.test_security_line import QUESTION, attack_while_another_asks, body, post

pytestmark = pytest.mark.server

SECONDS = 3
MEMORY = "400mb"


def shared_stream_pdf(pages: int) -> bytes:
    """``pages`` pages that all draw one content stream of 120,000 text operations writing nothing."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    content = DecodedStreamObject()
    content.set_data(b"BT /F1 12 Tf 10 10 Td () Tj ET\n" * 120_000)
    shared = writer._add_object(content.flate_encode())
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        page[NameObject("/Contents")] = shared
    written = io.BytesIO()
    writer.write(written)
    return written.getvalue()


def empty_paragraphs_docx(paragraphs: int) -> bytes:
    import docx

    blank = io.BytesIO()
    docx.Document().save(blank)
    written = io.BytesIO()
    with zipfile.ZipFile(blank) as source, zipfile.ZipFile(written, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            data = source.read(member.filename)
            if member.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + b"<w:p/>" * paragraphs, 1)
            target.writestr(member, data)
    return written.getvalue()


BOMBS = {"pages.pdf": ("application/pdf", lambda: shared_stream_pdf(50)), "paragraphs.docx": (
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document", lambda: empty_paragraphs_docx(3_000_000))}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    process = AppInProcess(tmp_path_factory.mktemp("app"), ("--backend", "huggingface", "--max-document-seconds", str(SECONDS),
                                                            "--max-document-memory", MEMORY))
    yield process
    process.stop()


def refused_in_words(message: str, name: str) -> None:
    assert f"{name} takes more than this server gives to reading one document ({SECONDS} s of CPU time, 400 MB of memory" in message, message


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_document_bomb_sent_to_the_api_is_stopped_and_others_are_answered(app, name):
    mime, make = BOMBS[name]
    data = make()
    post(app.url, "127.0.0.3", body(QUESTION))  # the memory a first reply sets up is no attack's
    part = {"type": "file", "file": {"filename": name, "file_data": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}
    attack = attack_while_another_asks(app, body([{"role": "user", "content": [part]}]))
    print(f"\n{name} ({len(data) / 1024:.0f} KB): {attack.response.status_code} after {attack.seconds:.1f} s; another user answered in "
          f"{attack.answered_seconds:.1f} s; server RSS {attack.memory[0] / 2**20:.0f} -> peak {max(attack.memory) / 2**20:.0f} MiB")
    assert attack.answered.status_code == 200 and "Paris" in attack.answered.json()["choices"][0]["message"]["content"]
    assert attack.answered_seconds < 30
    assert attack.response.status_code == 400, attack.response.text
    refused_in_words(attack.response.json()["error"]["message"], name)
    assert attack.seconds < SECONDS + 60
    assert max(attack.memory) - attack.memory[0] < 100 * 2**20


def test_a_document_bomb_dropped_in_the_message_box_is_stopped_and_the_chat_stays(app):
    """The page reads a document as it is dropped in the box (the note counts its tokens) and again
    as it is sent: both are stopped, the note and the send say why, and the conversation stays."""
    tab = PageClient(app.url)
    try:
        assert error(tab.call("restore", [None, None])) is None
        assert error(tab.chat("Say hello.")) is None
        path = tab.upload("pages.pdf", shared_stream_pdf(50))
        message = {"text": "Summarise this.", "files": [file_data(path)]}
        note = tab.call("attachments_note", [None, message, "", "", "", *NO_TOOLS.values()])
        assert error(note) is None, note
        refused_in_words(note["output"]["data"][0], "pages.pdf")
        sent = tab.chat("Summarise this.", [file_data(path)])
        assert "Say hello." in str(sent["output"]["data"]) and "Summarise this." not in str(sent["output"]["data"][0]), sent
    finally:
        tab.close()


def limits_of(pid: int) -> dict[str, list[str]]:
    """A process's limits as /proc lists them: each name, then its soft and hard values."""
    with open(f"/proc/{pid}/limits") as table:
        return {line[:26].strip(): line[26:].split()[:2] for line in list(table)[1:]}


def test_the_reading_child_leaves_no_core_dump_of_the_document_and_waits_for_idle_cores():
    """Stopped past its CPU time (SIGXCPU), a child allowed core files would write the user's
    document to one. The child lowers its limits once it has read the header: held there (its
    document not sent yet), its limits are read from /proc."""
    import json
    import subprocess
    import sys
    import time
    from dataclasses import asdict

    from engines.prompt import document_sandbox

    limits = document_sandbox.ReadingLimits(10, 1000, 10**6, SECONDS, 400 * 2**20)
    child = subprocess.Popen([sys.executable, "-m", document_sandbox.__name__], stdin=subprocess.PIPE, cwd=document_sandbox.ROOT)
    try:
        child.stdin.write(json.dumps({"name": "held.txt", "limits": asdict(limits)}).encode() + b"\n")
        child.stdin.flush()
        deadline = time.monotonic() + 60
        while limits_of(child.pid)["Max cpu time"][0] != str(SECONDS):  # lowered after the core file size
            assert time.monotonic() < deadline and child.poll() is None, "the child did not lower its CPU time limit"
            time.sleep(0.05)
        assert limits_of(child.pid)["Max core file size"] == ["0", "0"]
        # Documents refused back to back take only the CPU time nothing else wants.
        assert psutil.Process(child.pid).nice() == 19
    finally:
        child.kill()
        child.wait()
