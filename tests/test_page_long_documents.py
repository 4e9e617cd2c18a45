"""Documents longer than the model's context, in the page, on the real default model (transformers,
SmolLM2, 8,192 tokens of context): read into passages in the user's library with progress shown,
the passages the message is most about sent in their place with the choice said in numbers, found
again for a later question, cited passages shown under the reply, and Stop while reading."""

from __future__ import annotations

import re

import pytest
from gradio.utils import get_upload_folder
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from chat.keeper import ChatKeeper
from chat.session import ChatSession
from chat.turns import model_request
from harness.document_corpus import FACTS, corpus, inventory_code
from library.whole_document import NOTE_TOKENS, OUTLINE_HEADING, asks_about_the_whole, parts
from store import open_store
from store.tables import Chat
from tests.page_input import CONTROLS, message, run, settings
from webui.attachments import is_chip
from webui.chat_view import render
from webui.handlers import ChatHandlers
from webui.notices import toast

pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def uploads(tmp_path):
    paths = {}
    for number, (name, data) in enumerate(corpus().items()):
        path = tmp_path / f"upload{number}" / name
        path.parent.mkdir()
        path.write_bytes(data)
        paths[name] = str(path)
    return paths


def kept_session(store, chat_id="chat1"):
    return ChatSession(chat_id=chat_id, keeper=ChatKeeper(store, "login:ada", chat_id, upload_folder=get_upload_folder(), tell=toast))


async def stopped_once_shown(handlers, session, sent, shown) -> bool:
    """Send ``sent`` and press Stop once the chat shows ``shown``; whether it did."""
    stopped = False
    async for update in handlers.send(session, sent, **settings(4)):
        if not stopped and shown in str(update.get("chatbot", "")):
            handlers.stop(session)
            stopped = True
    return stopped


def fact(question_start):
    return next(fact for fact in FACTS if fact.question.startswith(question_start))


async def test_a_message_with_documents_past_the_context_is_answered_from_their_passages(loaded_models, store, uploads):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    context = loaded_models.model.context_length
    attached = [uploads["pump_manual.md"], uploads["handbook.pdf"]]
    note = handlers.attachments_note(session, message("", attached), system="", tools="")
    assert f"more than this model's context of {context:,} tokens: they will be read into passages" in note
    vacation = fact("How many vacation days")
    updates = await run(handlers.send(session, message(vacation.question, attached), **settings(8)))
    # Reading them into passages showed its progress, then the reply was written.
    progress = [update["chatbot"][-1]["content"] for update in updates if update.get("chatbot")
                and "reading it into passages" in str(update["chatbot"][-1].get("content"))]
    assert progress and re.search(r"of \d+ passages", " ".join(progress))
    asked, reply = session.turns
    assert asked.error is None and reply.content and len(store.library.documents("login:ada")) == 2
    manual, handbook = asked.documents
    together = sum(loaded_models.model.count_tokens(document.text) for document in asked.documents)
    for document in (manual, handbook):
        tokens = loaded_models.model.count_tokens(document.text)
        assert document.library_id and document.text  # kept whole in the chat, answered from passages
        assert re.fullmatch(rf"{re.escape(document.name)}: {tokens:,} tokens \({together:,} with the other documents\) > [\d,]+ left in "
                            rf"the context: answered from {len(document.passages)} passages?, [\d,]+ tokens", document.note), document.note
    given = manual.passages + handbook.passages
    assert [passage.number for passage in given] == list(range(1, len(given) + 1))
    assert any(vacation.answer in passage.text for passage in handbook.passages)
    assert all(passage.page is not None for passage in handbook.passages)
    # What the model read: the passages, numbered, in the documents' place, within the context.
    prompt = model_request(session.turns[:1]).messages[-1]["content"]
    assert "--- handbook.pdf: passages" in prompt and "cite each one you use by its number" in prompt
    assert handbook.text not in prompt and prompt.endswith(vacation.question)
    assert loaded_models.model.count_prompt_tokens(model_request(session.turns[:1])) < context
    chips = [part for part in render(session.tree)[0]["content"] if is_chip(part)]
    assert "answered from" in chips[1] and "[1]" in chips[0]
    # The reply's citations open the passages given; a number given none is said, not linked.
    place = session.tree.branch()[-1]
    session.tree.messages[place].content = f"Staff get {vacation.answer} [{given[-1].number}], see also [{len(given) + 5}]."
    block = next(shown for shown in render(session.tree) if shown.get("metadata", {}).get("title", "").startswith("📚 Sources"))
    assert block["metadata"]["title"] == f"📚 Sources [{given[-1].number}]" and given[-1].label() in block["content"]
    assert f"[{len(given) + 5}]: the model was given no passage of that number" in block["content"]

    # A later question, with nothing attached, searches the chat's documents again.
    pressure = fact("How much pressure can the HX-200")
    await run(handlers.send(session, message(pressure.question), **settings(8)))
    later = session.turns[2]
    # Each document the search found passages in: the manual at least, which holds the answer.
    assert later.error is None and later.documents[0].name == "pump_manual.md"
    assert {document.name for document in later.documents} <= {"pump_manual.md", "handbook.pdf"}
    assert all(not document.text and "searched again for this message" in document.note for document in later.documents)
    assert any(pressure.answer in passage.text for passage in later.documents[0].passages)
    assert session.turns[3].content
    # The same file in another chat of the same user is not read into passages again.
    other = kept_session(store, "chat2")
    updates = await run(handlers.send(other, message(vacation.question, [uploads["handbook.pdf"], uploads["pump_manual.md"]]), **settings(2)))
    assert not any("reading it into passages" in str(update.get("chatbot", "")) for update in updates)
    assert len(store.library.documents("login:ada")) == 2 and other.turns[0].documents[0].passages
    # Their text, in the chats' messages and in the library, counts once in Ada's quota: in the chats.
    with Session(store.engine) as kept:
        assert store._text_used(kept, "login:ada") == kept.scalar(select(func.sum(Chat.text_size)).where(Chat.owner == "login:ada"))


async def test_stop_while_a_document_is_read_into_passages_keeps_the_conversation(loaded_models, store, uploads):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    report = uploads["field_report.docx"]
    doubled = report.replace("field_report.docx", "long_report.docx")
    with open(report, "rb") as source, open(doubled, "wb") as copy:
        copy.write(source.read())
    assert await stopped_once_shown(handlers, session, message("How many puffins?", [report, doubled]), "reading it into passages")
    [asked] = session.turns
    assert asked.error.startswith("Stopped while field_report.docx was read into passages")
    assert store.library.documents("login:ada") == []


async def test_a_question_about_a_whole_document_reads_all_of_it_part_by_part(loaded_models, store, uploads):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    question = "How many sections does each document have? List all the section titles."
    sections = {"pump_manual.md": 70, "handbook.pdf": 60}
    attached = [uploads["pump_manual.md"], uploads["handbook.pdf"]]
    updates = await run(handlers.send(session, message(question, attached), **settings(8)))
    asked, reply = session.turns
    assert asked.error is None and reply.content
    shown = [str(update["chatbot"][-1]["content"]) for update in updates if update.get("chatbot")]
    number = 1
    for document in asked.documents:
        [entry] = [entry for entry in store.library.documents("login:ada") if entry.name == document.name]
        every = store.library.in_order("login:ada", entry.id)
        split = parts(every, (loaded_models.model.context_length - NOTE_TOKENS) // 2, loaded_models.model.count_tokens)
        # Every passage was read, in parts that fit the context, each noted by the model, numbered on.
        assert [passage.id for part in split for passage in part] == [passage.id for passage in every] and len(split) > 1
        outline, *notes = document.passages
        assert [note.number for note in document.passages] == list(range(number, number + 1 + len(split)))
        # The sections counted by the server, each heading once, in order (the manual's 70, the handbook's 60).
        assert outline.heading == OUTLINE_HEADING and outline.text.startswith(
            f"Outline, counted by the server: {document.name} has exactly {sections[document.name]} sections.\nSections, in order: 1. ")
        assert [note.heading.split(",")[0] for note in notes] == [f"part {index} of {len(split)}" for index in range(1, len(split) + 1)]
        assert all(note.text for note in notes)
        assert document.note == (f"{document.name}: {loaded_models.model.count_tokens(document.text):,} tokens, read whole for a question about all "
                                 f"of it: its outline and the notes of its {len(split)} parts sent")
        assert any(f"{len(split)} of {len(split)} parts noted" in line and document.name in line for line in shown)
        number += 1 + len(split)
    assert asked.documents[1].passages[1].heading.startswith("part 1 of ") and ", pages 1-" in asked.documents[1].passages[1].heading
    prompt = model_request(session.turns[:1]).messages[-1]["content"]
    assert all(note.text in prompt for document in asked.documents for note in document.passages)
    assert "--- pump_manual.md: passages [1]-" in prompt


async def test_a_count_over_a_whole_code_file_is_answered_with_the_exact_count(loaded_models, store, tmp_path):
    # 40 KB of Python, some 14,000 tokens: 128 functions and 6 classes, and "def" 257 times.
    path = tmp_path / "upload" / "inventory.py"
    path.parent.mkdir()
    path.write_text(inventory_code())
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    await run(handlers.send(session, message("How many functions does inventory.py define?", [str(path)]), **settings(24)))
    asked, reply = session.turns
    [document] = asked.documents
    # The question asks only what the server counts: the outline goes alone, no part is read by the model.
    [outline] = document.passages
    assert (outline.number, outline.heading) == (1, OUTLINE_HEADING)
    assert outline.text.startswith("Outline, counted by the server: inventory.py defines exactly 128 functions and 6 classes.\nFunctions: ")
    assert document.note.endswith("read whole for a question about all of it: its outline sent, which counts what the question asks")
    assert re.search(r"\b128\b", reply.content), reply.content


@pytest.mark.parametrize(("question", "choice"), [
    ("List the functions.", "whole"),  # searched by its words: read whole by hand (its outline answers it)
    ("How many functions does inventory.py define?", "search"),  # read whole by its words: searched by hand
])
async def test_the_chats_long_documents_setting_chooses_search_or_whole_over_the_questions_words(loaded_models, store, tmp_path, question, choice):
    path = tmp_path / "upload" / "inventory.py"
    path.parent.mkdir()
    path.write_text(inventory_code())
    assert asks_about_the_whole(question) is (choice == "search")
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    await run(handlers.send(session, message(question, [str(path)]), **settings(2), long_documents=choice))
    asked, reply = session.turns
    [document] = asked.documents
    assert asked.error is None and document.passages
    if choice == "whole":
        assert [passage.heading for passage in document.passages] == [OUTLINE_HEADING]
        assert "read whole for a question about all of it" in document.note
    else:
        assert OUTLINE_HEADING not in [passage.heading for passage in document.passages]
        assert "answered from" in document.note and "passage" in document.note


async def test_a_long_documents_choice_that_is_none_is_said_on_the_message(loaded_models, store, uploads):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    attached = [uploads["pump_manual.md"], uploads["handbook.pdf"]]  # together past the context
    await run(handlers.send(session, message("What is the warranty?", attached), **settings(2), long_documents="sometimes"))
    [asked] = session.turns
    assert asked.error == "Invalid long documents settings: long_documents must be one of: auto, search, whole; got 'sometimes'."
    assert store.library.documents("login:ada") == []


async def test_stop_while_a_whole_document_is_read_keeps_the_conversation(loaded_models, store, uploads):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = kept_session(store)
    attached = [uploads["pump_manual.md"], uploads["handbook.pdf"]]
    assert await stopped_once_shown(handlers, session, message("Summarize the whole manual.", attached), "parts noted")
    [asked] = session.turns
    assert asked.error.startswith("Stopped while all of pump_manual.md was read")


@pytest.mark.parametrize(("question", "whole"), [
    ("How many functions does the file define?", True), ("List all the section titles.", True), ("Summarize the report.", True),
    ("Compare chapters 2 and 5.", True), ("What is the warranty period?", False), ("Where do I file travel expenses?", False),
    ("How many vacation days do staff get each year?", False), ("What is reviewed every season?", False),
])
def test_questions_about_a_whole_document_are_told_from_others(question, whole):
    assert asks_about_the_whole(question) is whole
