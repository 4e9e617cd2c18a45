"""Documents attached in the page, driven through its handlers on the real default model: their
text reaches the model named by file and page, they show as chips, the note counts their tokens
with the model's own tokenizer, and what cannot be read or cannot fit is refused, the
conversation kept."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from chat.conversation_file import read_conversation, write_conversation
from chat.documents import PAGE_PIXELS
from chat.session import ChatSession
from chat.turns import model_request
from engines import LoadedModels
from engines.request import ChatRequest
from harness.document_samples import docx_bytes, encrypted_pdf_bytes, pdf_bytes
from limits import Limits
from tests.page_input import CONTROLS, message, run, settings
from webui.attachments import is_chip
from webui.chat_view import render
from webui.handlers import ChatHandlers, edited_text


@pytest.fixture
def handlers(loaded_models):
    return ChatHandlers(loaded_models, CONTROLS)


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "upload1" / "report.pdf"
    path.parent.mkdir()
    path.write_bytes(pdf_bytes(["The launch code is PELICAN-42.", None]))
    return str(path)


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "upload2" / "notes.docx"
    path.parent.mkdir()
    path.write_bytes(docx_bytes(["Minutes of the meeting."], [["Owner", "Task"], ["Ada", "Budget"]]))
    return str(path)


@pytest.mark.slow
async def test_documents_reach_the_model_named_by_file_and_page_and_show_as_chips(handlers, loaded_models, report, notes):
    session = ChatSession()
    await run(handlers.send(session, message("What is the launch code?", [report, notes]), **settings(12)))
    asked, answer = session.turns
    assert [d.name for d in asked.documents] == ["report.pdf", "notes.docx"] and asked.files == []
    expected_text = (
        "--- report.pdf, page 1 of 2 ---\nThe launch code is PELICAN-42.\n"
        "--- report.pdf, page 2 of 2 ---\n(no text on this page: an image only)\n--- end of report.pdf ---\n\n"
        "--- notes.docx ---\nMinutes of the meeting.\n| Owner | Task |\n| Ada | Budget |\n--- end of notes.docx ---\n\n"
        "What is the launch code?"
    )
    request = model_request(session.turns[:1])
    assert request.messages == [{"role": "user", "content": expected_text}]
    # What the model answered is its greedy answer to exactly that text.
    [greedy] = loaded_models.model.chat(ChatRequest.build([{"role": "user", "content": expected_text}], temperature=0, max_new_tokens=12))
    assert answer.content == greedy.response_text and answer.error is None
    shown = render(session.tree)[0]["content"]
    chips = [part for part in shown if is_chip(part)]
    assert len(chips) == 2 and "📄 report.pdf · PDF, 2 pages" in chips[0] and "PELICAN-42" in chips[0]
    assert "📄 notes.docx · Word, " in chips[1] and "\n" not in chips[1]
    # Editing the message keeps its own text only, not the chips'. Gradio sends an edit of each
    # part: the chip's leaves the conversation as it is, the text's answers anew.
    assert edited_text(shown) == "What is the launch code?"
    assert await run(handlers.edit(session, SimpleNamespace(index=0, value=chips[0]), **settings(12))) == [{}]
    assert [turn.content for turn in session.turns] == ["What is the launch code?", answer.content]
    await run(handlers.edit(session, SimpleNamespace(index=0, value="Repeat the code.", previous_value="What is the launch code?"), **settings(4)))
    assert session.turns[0].content == "Repeat the code." and len(session.turns[0].documents) == 2 and len(session.turns) == 2


async def test_the_note_counts_tokens_with_the_models_own_tokenizer(handlers, loaded_models, report, notes):
    note = handlers.attachments_note(ChatSession(), message("", [report, notes]), system="", tools="")
    tokenizer = loaded_models.model.engine.tokenizer
    session = ChatSession()
    await run(handlers.send(session, message("", [report, notes]), **settings(2)))
    report_tokens, notes_tokens = (len(tokenizer(d.text, add_special_tokens=False).input_ids) for d in session.turns[0].documents)
    assert f"report.pdf (PDF, 2 pages): {report_tokens:,} tokens · notes.docx (Word, " in note
    assert f"{notes_tokens:,} tokens" in note
    assert f"Together {report_tokens + notes_tokens:,} of this model's {loaded_models.model.context_length:,} tokens" in note
    # With a conversation before it, its prompt counts too.
    later = handlers.attachments_note(session, message("", [report]), system="", tools="")
    assert "With the conversation so far (" in later and "the prompt takes" in later
    assert handlers.attachments_note(session, message("just text"), system="", tools="") == ""


async def test_what_cannot_fit_the_context_is_refused_with_the_numbers(handlers, loaded_models, tmp_path):
    context = loaded_models.model.context_length
    path = tmp_path / "book.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * (context // 5))
    tokens = loaded_models.model.count_tokens(f"--- book.txt ---\n{path.read_text().strip()}\n--- end of book.txt ---")
    assert tokens > context
    note = handlers.attachments_note(ChatSession(), message("", [str(path)]), system="", tools="")
    assert f"book.txt (text, {len(path.read_text()):,} characters): {tokens:,} tokens" in note
    assert f"are more than this model's context of {context:,} tokens, so this message cannot be sent" in note
    session = ChatSession()
    await run(handlers.send(session, message("Summarise it.", [str(path)]), **settings(4)))
    # Sent anyway (the API's clients, or a page that ignores the note): refused, nothing cut.
    assert len(session.turns) == 1 and f"more than this model's limit of {context} tokens" in session.turns[0].error


async def test_a_document_that_cannot_be_read_is_refused_and_the_conversation_kept(handlers, tmp_path):
    session = ChatSession()
    await run(handlers.send(session, message("Hello", []), **settings(4)))
    before = [turn.model_dump() for turn in session.turns]
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypted_pdf_bytes("Secret"))
    note = handlers.attachments_note(session, message("", [str(locked)]), system="", tools="")
    assert note.startswith("⚠ locked.pdf is protected by a password")
    with pytest.warns(UserWarning, match="locked.pdf is protected by a password"):
        updates = await run(handlers.send(session, message("Read this", [str(locked)]), **settings(4)))
    assert [turn.model_dump() for turn in session.turns] == before
    assert all("message_box" not in update for update in updates), "the message left the box"


async def test_undo_puts_documents_back_and_exports_keep_their_text(handlers, report, tmp_path):
    session = ChatSession()
    await run(handlers.send(session, message("Code?", [report]), **settings(2)))
    exported = tmp_path / "chat.json"
    write_conversation(str(exported), session.tree, "", 10 * 2**20)
    saved = json.loads(exported.read_text())
    assert saved["turns"][0]["documents"][0]["name"] == "report.pdf"
    assert report not in exported.read_text(), "an export names a path on the server"
    turns = read_conversation(str(exported), handlers.limits, str(tmp_path / "imports")).tree.shown_messages()
    assert turns[0].documents[0].text == session.turns[0].documents[0].text
    assert model_request(turns[:1]).messages == model_request(session.turns[:1]).messages
    box = handlers.undo(session)["message_box"]
    assert box["value"] == {"text": "Code?", "files": [report]}


async def test_the_page_images_choice_is_ignored_for_a_model_that_reads_no_images(handlers, report):
    assert handlers.model_status()["pdfs_as_images"]["visible"] is False
    session = ChatSession()
    handlers.pdfs_as_images(session, True)
    await run(handlers.send(session, message("Code?", [report]), **settings(2)))
    assert session.turns[0].files == [] and session.turns[0].documents[0].name == "report.pdf"


async def test_pdfs_go_to_a_vision_model_as_page_images_when_chosen(tiny_vision_model, tmp_path, upload_folder):
    loaded_models = LoadedModels()
    loaded_models.load({"model_name_or_path": str(tiny_vision_model), "infer_backend": "huggingface"})
    try:
        handlers = ChatHandlers(loaded_models, CONTROLS, limits=Limits(max_document_page_images=2))
        assert handlers.model_status()["pdfs_as_images"]["visible"] is True
        session = ChatSession()
        handlers.pdfs_as_images(session, True)
        scan = tmp_path / "scan.pdf"
        scan.write_bytes(pdf_bytes([None, "A page with text."]))
        assert handlers.attachments_note(session, message("", [str(scan)]), system="", tools="") == "📎 scan.pdf: sent as page images."
        await run(handlers.send(session, message("What is on these pages?", [str(scan)]), **settings(2)))
        asked, answer = session.turns
        assert [Path(path).name for path in asked.files] == ["scan-page-1.png", "scan-page-2.png"] and asked.documents == []
        assert asked.error is None and answer.role == "assistant"
        assert all(Path(path).is_relative_to(upload_folder) for path in asked.files)
        request = model_request(session.turns[:1])
        assert request.media["image"] == asked.files and request.messages[0]["content"] == "<image><image>What is on these pages?"
        with Image.open(asked.files[0]) as page:
            # The page at about the pixels images reach the model with, the scan's picture on it.
            assert 0.95 * PAGE_PIXELS < page.width * page.height < 1.01 * PAGE_PIXELS
            assert page.getpixel((page.width // 2, page.height // 2)) == (200, 120, 40)
        longer = tmp_path / "longer.pdf"
        longer.write_bytes(pdf_bytes(["one", "two", "three"]))
        with pytest.warns(UserWarning, match=r"longer.pdf has 3 pages, more than the 2 .*max_document_page_images"):
            await run(handlers.send(session, message("And these?", [str(longer)]), **settings(2)))
        assert len(session.turns) == 2
    finally:
        loaded_models.unload()


def test_token_counts_do_not_keep_an_unloaded_model_alive(loaded_models):
    from webui import attachments

    class Counting:
        def count_tokens(self, text):
            return len(text.split())

    model = Counting()
    assert attachments._tokens(model, "three words here") == 3
    assert len(attachments._counted) >= 1
    held = len(attachments._counted)
    del model
    gc.collect()
    assert len(attachments._counted) == held - 1
