"""Documents, long pastes, the microphone and read aloud in the real page, in Chromium, on the
real app (the default model; the tiny audio model for the microphone)."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import soundfile
from playwright.sync_api import expect

from harness.document_corpus import FACTS, corpus
from harness.document_samples import encrypted_pdf_bytes, pdf_bytes
from harness.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    bot_messages,
    import_conversation,
    load_model,
    open_chat,
    open_tab,
    replies,
    send,
    set_number,
    user_messages,
    wait_until_answered,
)
from harness.tiny_models import build_qwen2_audio
from library.fitting import GivenPassage
from store import MessageTree
from chat.documents import AttachedDocument
from chat.turns import Turn
from chat.conversation_file import write_conversation
from webui.languages import said
from webui.long_paste import LONG_PASTE_CHARACTERS

FILE_INPUT = "#chat-input input[type=file]"
MICROPHONE = "#chat-input [data-testid=microphone-button]"
NOTE = "#attachments-note"
# How long two documents may take to be read into passages and answered from, beside a busy neighbour.
READING_MS = 600_000
PDF_TEXT = ("--- report.pdf, page 1 of 2 ---\nThe launch code is PELICAN-42.\n--- report.pdf, page 2 of 2 ---\n"
            "(no text on this page: an image only)\n--- end of report.pdf ---")


def greedy(page, max_new_tokens: int) -> None:
    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", max_new_tokens)
    open_tab(page, "Chat")


def test_a_pdf_is_counted_sent_shown_as_a_chip_and_answered_from(page, chat_model, tmp_path):
    greedy(page, 16)
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(pdf_bytes(["The launch code is PELICAN-42.", None]))
    page.locator(FILE_INPUT).set_input_files(str(pdf))
    # Counted with the model's own tokenizer before anything is sent.
    tokens = chat_model.count_tokens(PDF_TEXT)
    expect(page.locator(NOTE)).to_contain_text(f"report.pdf (PDF, 2 pages): {tokens} tokens. Together {tokens} of this model's 8,192 tokens.")
    wait_until_answered(page, send(page, "What is the launch code?"))
    expect(page.locator(NOTE)).to_have_text("")
    chip = user_messages(page).locator("details.document-chip")
    expect(chip.locator("summary")).to_have_text("📄 report.pdf · PDF, 2 pages")
    expect(chip.locator("pre")).to_be_hidden()
    chip.locator("summary").click()
    expect(chip.locator("pre")).to_have_text(PDF_TEXT)
    # The greedy reply to the document's text as the model got it.
    [expected] = chat_model.chat([{"role": "user", "content": PDF_TEXT + "\n\nWhat is the launch code?"}], temperature=0, max_new_tokens=16)
    expect(bot_messages(page).last).to_have_text(expected.response_text.strip())
    assert "PELICAN-42" in expected.response_text, expected.response_text

    # Editing the message: Gradio edits each part, the chip's too; the chip stays a chip.
    before = replies(page)
    user_messages(page).first.hover()
    page.get_by_role("button", name="Edit").first.click()
    page.locator("#chatbot textarea.edit-textarea").last.fill("Repeat the launch code.")
    page.get_by_role("button", name="Submit").first.click()
    wait_until_answered(page, before)
    expect(user_messages(page)).to_have_count(2)
    expect(user_messages(page).first.locator("details.document-chip summary")).to_have_text("📄 report.pdf · PDF, 2 pages")
    expect(user_messages(page).last).to_have_text("Repeat the launch code.")
    expect(bot_messages(page)).to_have_count(1)


def test_documents_past_the_context_are_answered_from_passages_whose_citations_open(page, chat_model, tmp_path):
    greedy(page, 8)
    files = []
    for name in ("pump_manual.md", "handbook.pdf"):
        files.append(tmp_path / name)
        files[-1].write_bytes(corpus()[name])
    page.locator(FILE_INPUT).set_input_files([str(path) for path in files])
    expect(page.locator(NOTE)).to_contain_text("they will be read into passages, and the passages your message is most about sent in their place")
    vacation = next(fact for fact in FACTS if fact.question.startswith("How many vacation days"))
    before = send(page, vacation.question)
    # Reading them into passages shows its progress, then the reply comes. The reading is done at
    # the lowest priority (library/embedder.py): beside another busy module it takes what that one
    # leaves, several minutes where alone it takes one.
    expect(page.locator("#chatbot").get_by_text("⏳ Reading the document")).to_be_visible(timeout=60_000)
    page.wait_for_function(f"window.replies > {before}", timeout=120_000)
    expect(page.locator("#stop-btn")).to_be_hidden(timeout=READING_MS)
    chips = user_messages(page).locator("details.document-chip")
    expect(chips).to_have_count(2)
    expect(chips.last.locator("summary")).to_contain_text(re.compile(r"📄 handbook\.pdf · PDF, 60 pages · .* left in the context: "
                                                                     r"answered from \d+ passages?, [\d,]+ tokens"))
    chips.last.locator("summary").click()
    expect(chips.last.locator("pre")).to_contain_text(re.compile(r"\[\d+\] \(handbook\.pdf, page \d+ · "))
    expect(chips.last.locator("pre")).to_contain_text(vacation.answer)

    # Both are in the user's library in the sidebar, and one deleted there is gone from it.
    page.locator("#document-library").get_by_text("Documents").click()
    expect(page.locator("#library-note")).to_contain_text("2 documents")
    page.locator("#library-list input").click()
    page.get_by_role("option", name=re.compile(r"handbook\.pdf · PDF, 60 pages")).click()
    page.locator("#delete-document-btn").click()
    expect(page.locator("#library-note")).to_contain_text("1 document,")
    page.locator("#library-list input").click()
    expect(page.get_by_role("option")).to_have_text([re.compile(r"pump_manual\.md · text, ")])
    page.keyboard.press("Escape")

    # A reply that cites [1]: its sources open to the passage, where it is.
    given = GivenPassage(number=1, name="handbook.pdf", page=8, heading="8. Leave", text=vacation.sentence)
    conversation = tmp_path / "cited.json"
    write_conversation(str(conversation), MessageTree.line([
        Turn(role="user", content=vacation.question, documents=[AttachedDocument(name="handbook.pdf", summary="PDF, 60 pages", text="(the handbook)",
                                                                                   passages=[given], note="handbook.pdf: answered from 1 passage")]),
        Turn(role="assistant", content=f"{vacation.answer} [1].")]), "", 10**6)
    import_conversation(page, conversation)
    sources = page.locator("#chatbot").get_by_text("📚 Sources [1]")
    expect(sources).to_be_visible()
    passage = page.locator("#chatbot").get_by_text(vacation.sentence, exact=True)
    expect(passage).to_be_hidden()
    sources.click()
    expect(passage).to_be_visible()
    expect(page.locator("#chatbot").get_by_text("[1] handbook.pdf, page 8 · 8. Leave")).to_be_visible()


def test_a_document_that_cannot_be_read_says_why_and_nothing_is_lost(page, tmp_path):
    greedy(page, 8)
    wait_until_answered(page, send(page, "Hello"))
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypted_pdf_bytes("Secret"))
    page.locator(FILE_INPUT).set_input_files(str(locked))
    expect(page.locator(NOTE)).to_contain_text("locked.pdf is protected by a password")
    box = page.locator("#chat-input textarea")
    box.fill("Read this")
    box.press("Enter")
    expect(page.locator(".toast-body")).to_contain_text("locked.pdf is protected by a password")
    expect(user_messages(page)).to_have_count(1)
    expect(box).to_have_value("Read this")


def test_a_long_paste_becomes_a_text_attachment(page):
    pasted = "Line of a very long log file with details.\n" * (LONG_PASTE_CHARACTERS // 40)
    box = page.locator("#chat-input textarea")
    box.focus()
    page.evaluate("""(text) => {
        const paste = new ClipboardEvent("paste", {clipboardData: new DataTransfer(), bubbles: true, cancelable: true});
        paste.clipboardData.setData("text/plain", text);
        document.querySelector("#chat-input textarea").dispatchEvent(paste);
    }""", pasted)
    expect(page.locator(NOTE)).to_contain_text(f"pasted-text-1.txt (text, {len(pasted):,} characters)")
    expect(box).to_have_value("")
    # A short paste stays text in the box.
    page.evaluate("""() => {
        const paste = new ClipboardEvent("paste", {clipboardData: new DataTransfer(), bubbles: true, cancelable: true});
        paste.clipboardData.setData("text/plain", "short");
        document.querySelector("#chat-input textarea").dispatchEvent(paste);
    }""")
    expect(page.locator(NOTE)).to_contain_text("pasted-text-1.txt")


def test_read_aloud_starts_and_stops_speech_synthesis(page):
    page.evaluate("""() => {
        window.spoken = [];
        window.cancelled = 0;
        speechSynthesis.speak = (utterance) => window.spoken.push(utterance.text);
        speechSynthesis.cancel = () => { window.cancelled += 1; };
    }""")
    greedy(page, 12)
    wait_until_answered(page, send(page, "Name three colors."))
    button = page.locator("#chatbot .read-aloud")
    expect(button).to_have_count(1)
    expect(button).to_have_text(said("chat.read_aloud"))
    button.click()
    reply = bot_messages(page).last.inner_text().strip()
    assert page.evaluate("window.spoken") == [reply]
    expect(button).to_have_text(said("chat.stop_reading"))
    cancelled = page.evaluate("window.cancelled")
    button.click()
    assert page.evaluate("window.cancelled") == cancelled + 1 and page.evaluate("window.spoken") == [reply]
    expect(button).to_have_text(said("chat.read_aloud"))


@pytest.fixture(scope="module")
def tiny_audio_model(tmp_path_factory):
    return build_qwen2_audio(tmp_path_factory.mktemp("qwen2_audio"))


def test_the_microphone_records_and_the_recording_reaches_an_audio_model(app, browser, tiny_audio_model, tmp_path):
    spoken = tmp_path / "spoken.wav"
    seconds = np.arange(48_000 * 2) / 48_000
    soundfile.write(spoken, (0.3 * np.sin(2 * np.pi * 440 * seconds)).astype(np.float32), 48_000)
    flags = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={spoken}"]
    # A Chromium of its own: the fake microphone is a flag of the browser's process.
    with contextlib.closing(browser.browser_type.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + flags)) as listening:
        page = listening.new_context(permissions=["microphone"]).new_page()
        open_chat(page, app.url)
        # The default model reads text only: no microphone is offered.
        expect(page.locator(MICROPHONE)).to_have_count(0)
        load_model(page, str(tiny_audio_model), f"Loaded {tiny_audio_model.name} on huggingface")
        set_number(page, "max-new-tokens", 4)
        open_tab(page, "Chat")
        expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile(r"Message \(text, audios, documents\)"))
        page.locator(MICROPHONE).click()
        page.get_by_role("button", name="Start recording").click()
        page.wait_for_timeout(1500)
        page.get_by_role("button", name="Stop recording").click()
        page.get_by_role("button", name="Attach audio").click()
        wait_until_answered(page, send(page, "What do you hear?"))
        # Sent as an uploaded audio file is: shown as audio in the message, read by the model.
        expect(page.locator("#chatbot [data-testid=user] audio")).to_have_count(1)
        # The reply's stats line says it was written; its text may be empty: the random tiny
        # model's 4 tokens for a recording whose length varies may all be special tokens.
        expect(page.locator("#chatbot .reply-stats")).to_have_count(1)
        expect(page.locator("#chatbot")).not_to_contain_text("could not answer")
