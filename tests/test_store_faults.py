"""The store failing under a conversation: PostgreSQL stopped mid-session (as a crash stops it)
and started again, an SQLite disk full, an SQLite file broken or not writable, with the page's
handlers (on the real default model where a reply is needed). The conversation stays and goes on, the page says what is not saved, and the store
catches up once it can."""

import pytest
from gradio.utils import get_upload_folder
from sqlalchemy import event

from chat.saved_chats import SavedChats
from chat.turns import Turn
from harness.postgres import postgres_server
from store import StoreError, open_store
from tests.page_input import CONTROLS, message, run, settings
from webui import chat_sidebar
from webui.handlers import ChatHandlers
from webui.notices import toast


async def a_chat_under_way(loaded_models, store, owner):
    """The page's handlers on ``store``, and a session of ``owner``'s whose first exchange is saved."""
    handlers = ChatHandlers(loaded_models, CONTROLS)
    chats = SavedChats(store, owner, upload_folder=get_upload_folder(), tell=toast)
    session = chats.new_session()
    await run(handlers.send(session, message("Say apple."), **settings(4)))
    return handlers, chats, session


@pytest.fixture
def server():
    with postgres_server() as running:
        yield running


async def test_a_database_gone_mid_session_is_said_and_nothing_is_lost_once_it_is_back(loaded_models, server, upload_folder):
    store = open_store(server.url)
    try:
        handlers, chats, session = await a_chat_under_way(loaded_models, store, "login:alice")

        server.stop()
        with pytest.warns(UserWarning, match=r"⚠ This chat could not be saved \(.*\)\. It stays on the page and goes on"):
            await run(handlers.send(session, message("Say banana."), **settings(4)))
        assert [t.content for t in session.turns if t.role == "user"] == ["Say apple.", "Say banana."]
        assert session.turns[-1].role == "assistant" and session.turns[-1].stats is not None, "the model answered all the same"
        assert "not saved now" in chat_sidebar.keep_chat(chats, session, session.chat_id, "", "")["note"]
        with pytest.raises(Exception, match="The saved chats cannot be reached now .*The conversation on screen stays"):
            chat_sidebar.search_chats(chats, "")

        server.start()
        await run(handlers.send(session, message("Say cherry."), **settings(4)))
        stored = store.tree("login:alice", session.chat_id).messages
        assert [m.data["content"] for m in stored] == [t.content for t in session.turns], "the store caught up"
        assert [m.data["content"] for m in stored if m.data["role"] == "user"] == ["Say apple.", "Say banana.", "Say cherry."]
        assert session.keeper.problem == ""
    finally:
        store.close()


def read_only(engine):
    """Every connection refused writes as SQLite refuses them on a file the server may not write
    ("attempt to write a readonly database"; the suite runs as root, which file modes do not stop)."""
    def refuse(connection, _record):
        connection.execute("PRAGMA query_only=ON")
    event.listen(engine, "connect", refuse)
    engine.dispose()
    return lambda: event.remove(engine, "connect", refuse) or engine.dispose()


def test_an_unwritable_database_is_said_and_the_chat_is_saved_once_it_can_be(tmp_path, upload_folder):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path)
    try:
        chats = SavedChats(store, "browser:b1", upload_folder=get_upload_folder(), tell=toast)
        session = chats.new_session()
        session.add(Turn(role="user", content="Say apple."))
        session.add(Turn(role="assistant", content="Apple."))
        chats.keep(session, session.chat_id, "", "")
        writable_again = read_only(store.engine)
        session.add(Turn(role="user", content="Say banana."))
        session.add(Turn(role="assistant", content="Banana."))
        session.tree.add(Turn(role="assistant", content="A banana."), session.tree.parents[session.tree.shown])  # regenerated meanwhile
        with pytest.warns(UserWarning, match=r"⚠ This chat could not be saved \(attempt to write a readonly database\)"):
            chats.keep(session, session.chat_id, "", "")
        assert "not saved now" in chat_sidebar.keep_chat(chats, session, session.chat_id, "", "")["note"]
        assert [m.data["content"] for m in store.tree("browser:b1", session.chat_id).messages] == ["Say apple.", "Apple."]

        writable_again()
        chats.keep(session, session.chat_id, "", "")
        assert session.keeper.problem == ""
        stored = store.tree("browser:b1", session.chat_id)
        assert [m.data["content"] for m in stored.messages] == [t.content for t in session.tree.messages], "every version, the one replaced too"
        assert stored.parents == session.tree.parents and stored.branch() == session.tree.branch()
    finally:
        store.close()


def full_at(engine, pages):
    """SQLite's "database or disk is full" from ``pages`` on, on every connection (a full disk,
    reached the way SQLite reaches it: a write that needs a page it cannot have)."""
    def limit(connection, _record):
        connection.execute(f"PRAGMA max_page_count={pages}")
    event.listen(engine, "connect", limit)
    engine.dispose()
    return lambda: event.remove(engine, "connect", limit) or engine.dispose()


async def test_a_full_disk_is_said_the_conversation_goes_on_and_the_store_catches_up(loaded_models, tmp_path, upload_folder):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path)
    try:
        handlers, chats, session = await a_chat_under_way(loaded_models, store, "browser:b1")
        with store.engine.connect() as connection:
            pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
        room_again = full_at(store.engine, pages)

        # Longer than an SQLite page (4 KiB), so that saving it needs a page the full disk cannot
        # give, and few tokens, as the model reads all of it: a run of "=" is ~1 token per 64 bytes
        # (6,000 bytes of words were 1,800 tokens, half a minute of the HF model's prompt evaluation).
        with pytest.warns(UserWarning, match=r"⚠ This chat could not be saved \(database or disk is full\)"):
            await run(handlers.send(session, message("Say banana. " + "=" * 6000), **settings(4)))
        assert session.turns[-1].role == "assistant" and session.turns[-1].stats is not None, "the model answered all the same"
        assert "not saved now" in chat_sidebar.keep_chat(chats, session, session.chat_id, "", "")["note"]
        assert len(store.tree("browser:b1", session.chat_id).messages) == 2, "what was saved before is still there"

        room_again()
        await run(handlers.send(session, message("Say cherry."), **settings(4)))
        stored = store.tree("browser:b1", session.chat_id).messages
        assert [m.data["content"] for m in stored] == [t.content for t in session.turns], "the store caught up"
        assert session.keeper.problem == ""
    finally:
        store.close()


async def test_a_database_file_broken_under_a_session_is_said_and_the_conversation_goes_on(loaded_models, tmp_path, upload_folder):
    path = tmp_path / "chats.db"
    store = open_store(f"sqlite:///{path}", data=tmp_path)
    try:
        handlers, chats, session = await a_chat_under_way(loaded_models, store, "browser:b1")
        store.engine.dispose()
        for leftover in tmp_path.glob("chats.db-*"):  # the write-ahead log would otherwise still hold the chat
            leftover.unlink()
        path.write_bytes(b"this is not a database " * 200)

        with pytest.warns(UserWarning, match=r"⚠ This chat could not be saved \(file is not a database\)\. It stays on the page and goes on"):
            await run(handlers.send(session, message("Say banana."), **settings(4)))
        assert [t.content for t in session.turns if t.role == "user"] == ["Say apple.", "Say banana."]
        assert session.turns[-1].stats is not None
        with pytest.raises(Exception, match="The saved chats cannot be reached now .*The conversation on screen stays"):
            chat_sidebar.search_chats(chats, "")
    finally:
        store.close()


def test_a_broken_database_file_at_start_says_what_to_do(tmp_path):
    path = tmp_path / "chats.db"
    path.write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(StoreError, match=r"file is not a database.* move .*chats\.db aside"):
        open_store(f"sqlite:///{path}", data=tmp_path)
    assert path.read_bytes() == b"\x00garbage" * 1000, "a broken file is left as it was, for its owner to rescue"
