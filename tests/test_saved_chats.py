"""Saved chats and one reply at a time, as plain functions (no browser): the list a browser keeps,
its media checks, its secret, and switching chats while a reply streams, on the real default model."""

import asyncio
import os

import pytest
from PIL import Image

from tests.page_input import CONTROLS, message, run, settings
from webui import chat_sidebar
from webui.browser_storage import page_secret
from webui.conversation import ChatSession, Turn, model_request, render
from webui.handlers import ChatHandlers
from webui.saved_chats import SavedChats, title_of


@pytest.fixture
def handlers(slot):
    return ChatHandlers(slot, CONTROLS)


@pytest.fixture
def upload_folder(tmp_path, monkeypatch):
    folder = tmp_path / "gradio"
    folder.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def chat_session(chat_id, *texts):
    turns = [Turn(role=("user", "assistant")[i % 2], content=text) for i, text in enumerate(texts)]
    return ChatSession(turns=turns, chat_id=chat_id)


def test_chats_are_kept_titled_listed_renamed_searched_and_deleted():
    chats = SavedChats()
    new = chats.new_session()
    chats.keep(new, new.chat_id, "Be brief.", "")
    assert chats.chats == [], "a chat is listed once it has a message"

    chats.keep(chat_session("a", "Say   apple,\nplease.", "Apple."), "a", "Be brief.", "[]")
    chats.keep(chat_session("b", "x" * 80, "Banana."), "b", "", "")
    assert [c.title for c in chats.chats] == ["x" * 59 + "…", "Say apple, please."]
    assert (chats.find("a").system, chats.find("a").tools) == ("Be brief.", "[]")
    # A chat that changes comes first; keeping it unchanged (a switch away) leaves the order.
    chats.keep(chat_session("a", "Say apple, please.", "Apple.", "More?", "Sure."), "a", "Be brief.", "[]")
    chats.keep(chat_session("b", "x" * 80, "Banana."), "b", "", "")
    assert [c.id for c in chats.chats] == ["a", "b"]
    # The page's system prompt goes to the chat it was shown with, not to a newer session.
    chats.keep(chat_session("b", "x" * 80, "Banana."), "a", "Be kind.", "")
    assert (chats.find("a").system, chats.find("b").system) == ("Be kind.", "")

    assert chats.rename("a", "  Fruit\n talk ") == "" and chats.find("a").title == "Fruit talk"
    assert "needs a title" in chats.rename("a", "  ") and chats.find("a").title == "Fruit talk"
    assert "once it has a message" in chats.rename(new.chat_id, "Nothing yet")
    assert chats.choices("FRUIT") == [("Fruit talk", "a")] and len(chats.choices("")) == 2
    chats.delete("a")
    assert [c.id for c in chats.chats] == ["b"]
    assert title_of([Turn(role="user", files=["/x/sunset.png"])]) == "sunset.png"


def test_the_browser_keeps_only_what_a_chat_needs_and_bad_data_is_explained():
    chats = SavedChats()
    session = chat_session("a", "Hi", "Hello")
    session.turns[1].writing, session.turns[1].tool_text = True, "<tool_call>"
    chats.keep(session, "a", "", "")
    chats.current = "a"
    stored = chats.for_browser()
    assert stored == {"current": "a", "chats": [{"id": "a", "title": "Hi", "updated": chats.chats[0].updated,
                                                   "turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}]}
    restored, problem = SavedChats.from_browser(stored)
    assert problem == "" and restored.find("a").turns == [Turn(role="user", content="Hi"), Turn(role="assistant", content="Hello")]
    assert SavedChats.from_browser(None) == (SavedChats(), "")
    empty, problem = SavedChats.from_browser({"chats": [{"id": "a", "title": "x", "turns": [{"role": "robot"}]}]})
    assert empty.chats == [] and problem.startswith("⚠ The chats saved in this browser could not be read (chats.0.turns.0.role")


def test_media_the_server_no_longer_has_or_never_stored_show_as_missing(upload_folder, tmp_path):
    kept = upload_folder / "abc" / "kept.png"
    kept.parent.mkdir()
    Image.new("RGB", (8, 8), "red").save(kept)
    gone = upload_folder / "abc" / "gone.png"
    outside = tmp_path / "outside.png"
    Image.new("RGB", (8, 8), "blue").save(outside)
    link = upload_folder / "abc" / "link.png"
    link.symlink_to(outside)
    chats = SavedChats()
    turn = Turn(role="user", content="Look", files=[str(kept), str(gone), str(outside), str(link), "/etc/hostname"])
    chats.keep(ChatSession(turns=[turn], chat_id="a"), "a", "", "")

    session = chats.open("a", str(upload_folder))
    [opened] = session.turns
    assert opened.files == [str(kept)]
    assert opened.missing_files == ["gone.png", "outside.png", "link.png", "hostname"]
    shown = render(session.turns)
    assert shown[0]["content"] == [{"path": str(kept)}, "Look"]
    assert shown[1]["metadata"]["title"] == "📎 Missing files" and "gone.png, outside.png" in shown[1]["content"]
    request = model_request(session.turns)
    assert request.messages == [{"role": "user", "content": "<image>Look"}] and request.media == {"image": [str(kept)]}
    # A message whose only file is gone still shows.
    only = Turn(role="user", files=[str(gone)])
    chats.keep(ChatSession(turns=[only], chat_id="b"), "b", "", "")
    assert render(chats.open("b", str(upload_folder)).turns)[0]["content"] == ["📎 gone.png"]


def test_the_secret_is_made_once_and_kept(tmp_path):
    secret = page_secret(tmp_path)
    assert len(secret) >= 32 and page_secret(tmp_path) == secret
    assert (tmp_path / "browser-state-secret").stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["browser-state-secret"]
    assert page_secret(tmp_path / "other") != secret


async def started_reply(handlers, session, text):
    """The reply to ``text`` streaming in a task, once it has some words."""
    task = asyncio.create_task(run(handlers.send(session, message(text), **settings(600))))
    while not (session.turns and session.turns[-1].role == "assistant" and len(session.turns[-1].content) > 10):
        assert not task.done(), "the reply ended before it could be watched"
        await asyncio.sleep(0.01)
    return task


async def test_a_second_message_waits_for_the_reply(handlers):
    session = ChatSession()
    task = await started_reply(handlers, session, "Write a long story about a dragon.")
    with pytest.warns(UserWarning, match="A reply is being written"):
        refused = await run(handlers.send(session, message("And a poem?"), **settings()))
    assert refused == [{}], "the page must stay as it is"
    assert [t.role for t in session.turns] == ["user", "assistant"] and session.answering
    handlers.stop(session)
    await task
    assert not session.answering and session.turns[-1].stopped
    await run(handlers.send(session, message("And a poem?"), **settings(4)))
    assert [t.content for t in session.turns if t.role == "user"] == ["Write a long story about a dragon.", "And a poem?"]


async def test_switching_chats_stops_the_reply_and_keeps_it_in_its_own_chat(handlers, upload_folder):
    chats = chat_sidebar.restore(None)["chats"]
    first = chats.open(chats.current, str(upload_folder))
    await run(handlers.send(first, message("Say apple."), **settings(4)))
    chat_sidebar.keep_chat(chats, first, first.chat_id, "Be brief.", "")
    second = (await chat_sidebar.new_chat(chats, first, first.chat_id, "Be brief.", ""))["session"]
    task = await started_reply(handlers, second, "Write a long story about a lighthouse.")

    view = await chat_sidebar.switch_chat(chats, second, second.chat_id, "Be long.", "", first.chat_id)
    assert task.done() and not second.answering, "the switch waits for the reply to stop"
    shown = view["session"]
    assert shown is not second and shown.chat_id == first.chat_id == view["shown"]
    assert [t.content for t in shown.turns][0] == "Say apple." and view["system"] == "Be brief." and view["chatbot"] == render(shown.turns)
    [kept] = [c for c in view["storage"]["chats"] if c["id"] == second.chat_id]
    assert kept["system"] == "Be long." and kept["turns"][0]["content"] == "Write a long story about a lighthouse."
    assert kept["turns"][1]["stopped"] and kept["turns"][1]["content"] == second.turns[1].content
    assert len(second.turns[1].content) < 2000, "the reply went on after the switch"
