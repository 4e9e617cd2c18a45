"""The chat core (chat/) on its own: no Gradio, no page, no model. What a user does to a chat
changes the tab's session or is refused with the notice that says why, the conversation as it
was; the keeper tells its user, through the Tell it is given, when a chat cannot be saved and
when it is saved again."""

import subprocess
import sys
from pathlib import Path

import pytest

from chat import actions
from chat.actions import Refused
from chat.conversation_file import Conversation
from chat.notices import Notice
from chat.saved_chats import SavedChats
from chat.session import ChatSession
from chat.turns import SavedToolCall, Turn
from engines import ChatError
from limits import Limits
from store import MessageTree, open_store

ROOT = Path(__file__).resolve().parent.parent


def exchange(session: ChatSession, asked: str, answered: str) -> None:
    session.add(Turn(role="user", content=asked))
    session.add(Turn(role="assistant", content=answered))


def contents(session: ChatSession) -> list[str]:
    return [turn.content for turn in session.turns]


def refusal(action, *args) -> Notice:
    with pytest.raises(Refused) as refused:
        action(*args)
    return refused.value.notice


@pytest.fixture
def chats(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path)
    told: list[Notice] = []
    yield SavedChats(store, "login:ada", upload_folder=str(tmp_path / "uploads"), tell=told.append), told
    store.close()


def test_the_core_runs_without_gradio_or_the_page():
    """Every module of chat/, imported in a fresh interpreter, brings neither Gradio nor webui/ in."""
    probe = ("import importlib, pkgutil, sys, chat\n"
             "for module in pkgutil.iter_modules(chat.__path__): importlib.import_module('chat.' + module.name)\n"
             "print(sorted(name for name in sys.modules if name.split('.')[0] in ('gradio', 'webui')))")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


def test_undo_takes_the_last_exchange_out_and_hands_its_message_back():
    session = ChatSession()
    exchange(session, "Say apple.", "Apple.")
    exchange(session, "Say pear.", "Pear.")
    taken = actions.undo(session)
    assert taken.content == "Say pear." and contents(session) == ["Say apple.", "Apple."]
    assert actions.undo(session).content == "Say apple." and actions.undo(session) is None and contents(session) == []


def test_no_change_of_the_conversation_while_a_reply_is_written_into_it():
    session = ChatSession()
    exchange(session, "Say apple.", "Apple.")
    assert session.reply.begin()
    for action, *args in [(actions.undo,), (actions.clear,), (actions.show_version, 0),
                          (actions.take_conversation, Conversation(MessageTree.line([Turn(role="user", content="Other.")]), ""))]:
        assert refusal(action, session, *args) == Notice("chat.busy_changing"), action
    assert contents(session) == ["Say apple.", "Apple."]
    session.reply.end()
    actions.clear(session)
    assert contents(session) == [] and len(session.tree) == 0


def test_answering_again_keeps_the_replies_as_earlier_versions():
    session = ChatSession()
    exchange(session, "Name a fruit.", "Apple.")
    session.turns[0].error = "It was refused."
    actions.to_answer_again(session)
    assert contents(session) == ["Name a fruit."] and session.turns[0].error is None
    session.add(Turn(role="assistant", content="Pear."))
    reply = session.tree.shown
    assert [session.tree.messages[place].content for place in session.tree.versions(reply)] == ["Apple.", "Pear."]
    assert refusal(actions.to_answer_again, ChatSession()) == Notice("chat.nothing_to_regenerate", level="info")


def test_only_a_reply_with_text_and_no_calls_can_be_continued():
    session = ChatSession()
    assert refusal(actions.to_continue, session).key == "chat.nothing_to_continue"
    session.add(Turn(role="user", content="Call the clock."))
    assert refusal(actions.to_continue, session).key == "chat.nothing_to_continue"
    session.add(Turn(role="assistant", content="Calling.", tool_calls=[SavedToolCall(id="c1", name="clock", arguments="{}")]))
    assert refusal(actions.to_continue, session).key == "chat.nothing_to_continue"
    session.turns[-1].tool_calls = []
    actions.to_continue(session)


def test_an_edited_message_is_a_new_version_and_a_reply_edit_that_is_no_text_is_refused():
    session = ChatSession()
    exchange(session, "Say apple.", "Apple.")
    actions.edit_message(session, 0, "Say pear.")
    assert contents(session) == ["Say pear."]
    assert [session.tree.messages[place].content for place in session.tree.versions(session.tree.shown)] == ["Say apple.", "Say pear."]
    assert refusal(actions.edit_reply, session, 0, None) == Notice("chat.not_editable")
    session.add(Turn(role="assistant", content="Pear."))
    actions.edit_reply(session, session.tree.shown, Turn(role="assistant", content="A pear."))
    assert contents(session) == ["Say pear.", "A pear."]


def test_another_version_is_shown_and_saved_and_a_place_that_is_none_is_refused(chats):
    saved, told = chats
    session = saved.new_session()
    exchange(session, "Name a fruit.", "Apple.")
    first = session.tree.shown
    actions.to_answer_again(session)
    session.add(Turn(role="assistant", content="Pear."))
    actions.show_version(session, first)
    assert contents(session) == ["Name a fruit.", "Apple."]
    assert [turn.content for turn in saved.open(session.chat_id, "").turns] == ["Name a fruit.", "Apple."], "saved as shown"
    for place in (None, -1, len(session.tree)):
        assert refusal(actions.show_version, session, place) == Notice("chat.no_such_version")
    assert told == []


def test_a_conversation_taken_from_a_file_is_shown_and_never_written_over_the_chat_before(chats):
    saved, _ = chats
    session = saved.new_session()
    exchange(session, "Say apple.", "Apple.")
    session.keeper.save(session.tree)
    before = session.chat_id
    actions.take_conversation(session, Conversation(MessageTree.line([Turn(role="user", content="Imported.")]), "Be brief."))
    assert contents(session) == ["Imported."] and session.keeper is None
    assert [turn.content for turn in saved.open(before, "").turns] == ["Say apple.", "Apple."]


def test_the_keeper_tells_once_that_a_chat_is_not_saved_and_again_when_it_is(chats, monkeypatch):
    saved, told = chats
    session = saved.new_session()
    exchange(session, "Say apple.", "Apple.")
    write = saved.store.write

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saved.store, "write", full_disk)
    session.keeper.save(session.tree)
    exchange(session, "Say pear.", "Pear.")
    session.keeper.save(session.tree)
    assert [notice.key for notice in told] == ["sidebar.save_failed"] and "No space left" in told[0].values["problem"]
    monkeypatch.setattr(saved.store, "write", write)
    session.keeper.save(session.tree)
    assert told[1:] == [Notice("sidebar.saved_again", level="info")]
    assert [turn.content for turn in saved.open(session.chat_id, "").turns] == ["Say apple.", "Apple.", "Say pear.", "Pear."]


async def test_a_message_is_added_with_its_documents_read_and_a_file_it_cannot_read_adds_nothing(tmp_path):
    session = ChatSession()
    notes = tmp_path / "notes.txt"
    notes.write_text("The kettle is in the second cupboard.")
    image = tmp_path / "photo.png"
    image.write_bytes(b"not read here: a medium goes to the model as it is")
    await actions.add_message(session, "Where is the kettle?", [str(notes), str(image)], None, Limits(), "login:ada", str(tmp_path))
    [turn] = session.turns
    assert turn.content == "Where is the kettle?" and turn.files == [str(image)]
    assert [document.name for document in turn.documents] == ["notes.txt"] and "second cupboard" in turn.documents[0].text
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is no PDF")
    with pytest.raises(ChatError, match="broken.pdf"):
        await actions.add_message(session, "And this?", [str(broken)], None, Limits(), "login:ada", str(tmp_path))
    assert contents(session) == ["Where is the kettle?"]
