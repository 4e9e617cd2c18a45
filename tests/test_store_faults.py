"""The store failing under a conversation: PostgreSQL stopped mid-session (as a crash stops it)
and started again, with the page's handlers on the real default model. The conversation stays
and goes on, the page says what is not saved, and the store catches up once it can."""

import pytest

from harness.postgres import postgres_server
from store import open_store
from tests.page_input import CONTROLS, message, run, settings
from webui import chat_sidebar
from webui.handlers import ChatHandlers
from webui.saved_chats import SavedChats


@pytest.fixture
def server():
    with postgres_server() as running:
        yield running


async def test_a_database_gone_mid_session_is_said_and_nothing_is_lost_once_it_is_back(slot, server, upload_folder):
    store = open_store(server.url)
    try:
        handlers = ChatHandlers(slot, CONTROLS)
        chats = SavedChats(store, "login:alice")
        session = chats.new_session()
        await run(handlers.send(session, message("Say apple."), **settings(4)))

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
        stored = store.messages("login:alice", session.chat_id)
        assert [m.data["content"] for m in stored] == [t.content for t in session.turns], "the store caught up"
        assert [m.data["content"] for m in stored if m.data["role"] == "user"] == ["Say apple.", "Say banana.", "Say cherry."]
        assert session.keeper.problem == ""
    finally:
        store.close()
