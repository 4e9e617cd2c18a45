"""Saved chats and one reply at a time, as plain functions (no browser): one user's chats in the
store (SQLite here; tests/test_store.py runs the store on PostgreSQL too), their media checks,
the browser's id and secret, the chats older versions kept in the browser, and switching chats
while a reply streams, on the real default model."""

import asyncio
import json
import os
import re
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.utils import get_upload_folder
from PIL import Image

from chat import saved_chat_actions
from chat.keeper import title_of
from chat.saved_chats import SavedChats
from chat.session import ChatSession
from chat.turns import Turn, model_request
from limits import Limits
from store import MessageTree, Quota, open_store
from tests.page_input import CONTROLS, message, run, settings
from webui import chat_presets, chat_sidebar
from webui.browser_storage import browser_memory, page_secret
from webui.chat_view import render
from webui.handlers import ChatHandlers
from webui.languages import said
from webui.notices import toast, words


@pytest.fixture
def handlers(loaded_models):
    return ChatHandlers(loaded_models, CONTROLS)


@pytest.fixture
def chat_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}")
    yield store
    store.close()


def user_chats(store, owner="browser:" + "a" * 32):
    return SavedChats(store, owner, owner.removeprefix("browser:"), upload_folder=get_upload_folder(), tell=toast)


def versions_of(session, index):
    """The places of the versions of the message ``index`` of the branch the session shows."""
    return session.tree.versions(session.tree.branch()[index])


def chat_session(chats, *texts):
    session = chats.new_session()
    for i, text in enumerate(texts):
        session.add(Turn(role=("user", "assistant")[i % 2], content=text))
    return session


def test_chats_are_kept_titled_listed_renamed_searched_and_deleted(chat_store):
    chats = user_chats(chat_store)
    new = chats.new_session()
    chats.keep(new, new.chat_id, "Be brief.", "")
    assert chats.choices() == [], "a chat is listed once it has a message"

    a = chat_session(chats, "Say   apple,\nplease.", "Apple.")
    chats.keep(a, a.chat_id, "Be brief.", "[]")
    b = chat_session(chats, "x" * 80, "Banana, 100% yellow.")
    chats.keep(b, b.chat_id, "", "")
    assert [title for title, _ in chats.choices()] == ["x" * 59 + "…", "Say apple, please."]
    assert (chats.find(a.chat_id).system, chats.find(a.chat_id).tools) == ("Be brief.", "[]")
    # A chat that changes comes first; keeping it unchanged (a switch away) leaves the order.
    a.add(Turn(role="user", content="More?"))
    a.add(Turn(role="assistant", content="Sure."))
    chats.keep(a, a.chat_id, "Be brief.", "[]")
    chats.keep(b, b.chat_id, "", "")
    assert [chat_id for _, chat_id in chats.choices()] == [a.chat_id, b.chat_id]
    # The page's system prompt goes to the chat it was shown with, not to a newer session.
    chats.keep(b, a.chat_id, "Be kind.", "")
    assert (chats.find(a.chat_id).system, chats.find(b.chat_id).system) == ("Be kind.", "")

    assert chats.rename(a.chat_id, "  Fruit\n talk ") is None and chats.find(a.chat_id).title == "Fruit talk"
    assert "needs a title" in words(chats.rename(a.chat_id, "  ")) and chats.find(a.chat_id).title == "Fruit talk"
    assert "once it has a message" in words(chats.rename(new.chat_id, "Nothing yet"))
    # Search reads titles and messages, whatever their case; % and _ are letters there, not wildcards.
    assert chats.choices("FRUIT") == [("Fruit talk", a.chat_id)] and len(chats.choices("")) == 2
    assert chats.choices("banana") == [("x" * 59 + "…", b.chat_id)] and chats.choices("SURE") == [("Fruit talk", a.chat_id)]
    assert chats.choices("100%") == [("x" * 59 + "…", b.chat_id)] and chats.choices("1%0") == []
    chats.delete(a.chat_id)
    assert [chat_id for _, chat_id in chats.choices()] == [b.chat_id]
    assert title_of([Turn(role="user", files=["/x/sunset.png"])]) == "sunset.png"


def test_each_message_is_a_row_and_a_reopened_chat_is_as_it_was(chat_store):
    chats = user_chats(chat_store)
    session = chat_session(chats, "Hi", "Hello")
    session.turns[1].writing, session.turns[1].tool_text = True, "<tool_call>"
    session.keeper.save(session.tree)
    assert [m.state for m in chat_store.tree(chats.owner, session.chat_id).messages] == ["done", "writing"]
    # Only what a chat needs is stored: nothing that exists only while a reply streams.
    assert [m.data for m in chat_store.tree(chats.owner, session.chat_id).messages] == [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    # A reply the store still has as writing (the server died mid-reply) opens as stopped.
    reopened = chats.open(session.chat_id, "")
    assert [(t.content, t.stopped) for t in reopened.turns] == [("Hi", False), ("Hello", True)]

    session.turns[1].writing = False
    session.turns[1].content = "Hello there"
    session.add(Turn(role="user", content="Bye", error="No model is loaded."))
    session.keeper.save(session.tree)
    rows = chat_store.tree(chats.owner, session.chat_id).messages
    assert [(m.data["content"], m.state) for m in rows] == [("Hi", "done"), ("Hello there", "done"), ("Bye", "error")]
    assert session.keeper.rows == [m.id for m in rows]
    # A regenerated reply is a new row beside the earlier one, which stays as a version; the others stay the rows they were.
    session.tree.add(Turn(role="assistant", content="Hi again"), 0)
    session.keeper.save(session.tree)
    stored = chat_store.tree(chats.owner, session.chat_id)
    assert [m.id for m in stored.messages] == [*(m.id for m in rows), session.keeper.rows[3]] and stored.versions(3) == [1, 3]
    assert [t.content for t in chats.open(session.chat_id, "").turns] == ["Hi", "Hi again"]


def test_two_tabs_of_one_chat_never_drop_each_others_messages(chat_store):
    chats = user_chats(chat_store)
    first = chat_session(chats, "Hi", "Hello")
    chats.keep(first, first.chat_id, "", "")
    second = chats.open(first.chat_id, "")
    first.add(Turn(role="user", content="From tab one"))
    second.add(Turn(role="user", content="From tab two"))
    first.keeper.save(first.tree)
    second.keeper.save(second.tree)
    other_tab = user_chats(chat_store)
    other_chat = chat_session(other_tab, "Another chat")
    other_tab.keep(other_chat, other_chat.chat_id, "", "")
    # Each tab's message follows what that tab showed: two versions, the one written last shown.
    reopened = chats.open(first.chat_id, "")
    assert [t.content for t in reopened.turns] == ["Hi", "Hello", "From tab two"]
    assert [reopened.keeper.rows[place] for place in reopened.tree.versions(3)] == [first.keeper.rows[2], second.keeper.rows[2]]
    reopened.tree.show(2)
    assert [t.content for t in reopened.turns] == ["Hi", "Hello", "From tab one"]
    assert len(chats.choices()) == 2


def test_a_tabs_list_shows_the_chats_other_tabs_write_and_is_left_alone_otherwise(chat_store):
    here, there = user_chats(chat_store), user_chats(chat_store)
    chat_sidebar.list_update(here)
    assert chat_sidebar.refresh_list(here, "") == gr.skip()
    written = chat_session(there, "Written in another tab")
    there.keep(written, written.chat_id, "", "")
    assert chat_sidebar.refresh_list(here, "")["choices"] == [("Written in another tab", written.chat_id)]
    assert chat_sidebar.refresh_list(here, "") == gr.skip(), "nothing new: the list is left as the person sees it"
    assert chat_sidebar.refresh_list(here, "apples") == {"__type__": "update", "choices": [], "value": None}
    assert chat_sidebar.refresh_list(None, "") == gr.skip()


def test_a_responses_chain_the_store_shows_opens_in_its_logins_tab_with_its_call_answered(tmp_path):
    """--responses-in-page: a chain of the Responses API (a call, then its result) opens as the
    page's own turns, the call's result in the reply, and is the chat the tab would write back."""
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path, responses_in_page=True)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    store.responses.keep("login:ada", "resp_1", None, [{"role": "user", "content": "Weather in Paris?"},
                                                       {"role": "assistant", "content": "", "tool_calls": [call]}], {})
    store.responses.keep("login:ada", "resp_2", "resp_1", [{"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
                                                           {"role": "assistant", "content": "It is 18 C."}], {})
    chats = SavedChats(store, "login:ada", upload_folder=get_upload_folder(), tell=toast)
    assert chat_sidebar.refresh_list(chats, "")["choices"] == [("Weather in Paris?", chats.newest())]
    session = chats.open(chats.newest(), "")
    [question, reply] = session.turns
    assert (question.content, reply.content) == ("Weather in Paris?", "It is 18 C.")
    [[ran]] = [step.tool_calls for step in reply.steps]
    assert (ran.name, ran.arguments, ran.result) == ("get_weather", '{"city": "Paris"}', "18 C")
    stamp = store.list_stamp("login:ada")
    session.keeper.save(session.tree)
    assert store.list_stamp("login:ada") == stamp, "the tab found its turns as the store has them: nothing to write"
    assert SavedChats(store, "login:bob", upload_folder=get_upload_folder()).choices() == []
    store.close()


def test_the_tick_reads_the_list_only_when_the_store_says_it_may_have_changed(chat_store, monkeypatch):
    """Every tab asks every few seconds; a search reads every message. Where nothing changed, the
    tick reads one row of the store, not the list."""
    here, there = user_chats(chat_store), user_chats(chat_store)
    reads = []
    listing = chat_store.chats
    monkeypatch.setattr(chat_store, "chats", lambda owner, query="": reads.append(query) or listing(owner, query))
    written = chat_session(there, "Apples and pears")
    there.keep(written, written.chat_id, "", "")
    assert chat_sidebar.refresh_list(here, "apples")["choices"] == [("Apples and pears", written.chat_id)] and reads == ["apples"]
    for _ in range(3):
        assert chat_sidebar.refresh_list(here, "apples") == gr.skip()
    assert reads == ["apples"], "nothing changed: the list was not read again"
    other = user_chats(chat_store, "login:bob")
    other.keep(chat_session(other, "Bob's apples"), "", "", "")
    assert chat_sidebar.refresh_list(here, "apples") == gr.skip() and reads == ["apples"], "another user's chats are not this list"
    for change in (lambda: there.rename(written.chat_id, "Renamed"), lambda: there.delete(written.chat_id), there.undo_delete):
        change()
        chat_sidebar.refresh_list(here, "apples")
        assert len(reads) == 2, "each change is read once"
        reads.clear()
        reads.append("apples")
    chat_sidebar.refresh_list(here, "")
    assert reads[-1] == "", "another search is read"


async def test_a_chat_open_in_two_tabs_shows_what_the_other_tab_writes_and_is_left_alone_otherwise(chat_store):
    chats = user_chats(chat_store)
    here = chat_session(chats, "Hi", "Hello")
    chats.keep(here, here.chat_id, "", "")
    there = chats.open(here.chat_id, "")
    assert await chat_sidebar.refresh_chat(chats, here) == {}, "its own writes are nothing new to a tab"
    assert await chat_sidebar.refresh_chat(chats, there) == {}

    there.add(Turn(role="user", content="From the other tab"))
    there.add(Turn(role="assistant", content="Half a rep", writing=True))
    there.keeper.save(there.tree)
    shown = await chat_sidebar.refresh_chat(chats, here)
    assert [t.content for t in here.turns] == ["Hi", "Hello", "From the other tab", "Half a rep"] and shown == {"chatbot": render(here.tree)}
    assert await chat_sidebar.refresh_chat(chats, here) == {}, "nothing new since"
    # A tab writing a reply, or with a change of its own not yet saved, is left as it is.
    there.turns[-1].content, there.turns[-1].writing = "Half a reply, then all of it.", False
    there.keeper.save(there.tree)
    here.reply.begin()
    assert await chat_sidebar.refresh_chat(chats, here) == {}
    here.reply.end()
    here.add(Turn(role="user", content="Not saved yet"))
    assert await chat_sidebar.refresh_chat(chats, here) == {}
    here.remove([here.tree.shown])
    assert await chat_sidebar.refresh_chat(chats, here) == {"chatbot": render(here.tree)}
    assert here.turns[-1].content == "Half a reply, then all of it." and not here.turns[-1].stopped
    # A regenerated reply in the other tab: this tab shows it, with its ‹2/2›.
    there.tree.add(Turn(role="assistant", content="Another reply"), there.tree.parents[there.tree.shown])
    there.keeper.save(there.tree)
    await chat_sidebar.refresh_chat(chats, here)
    assert here.turns[-1].content == "Another reply" and len(here.tree.versions(here.tree.shown)) == 2
    updates = await chat_sidebar.refresh(chats, here, "")
    assert set(updates) == {"chat_list"}, "the list once, then only what changed"
    assert await chat_sidebar.refresh(chats, here, "") == {}
    assert await chat_sidebar.refresh(None, ChatSession(), "") == {}


def chat_written_elsewhere_and_another(chats):
    """Two saved chats, the first open here and written into by another tab since."""
    left = chat_session(chats, "Say apple.", "Apple.")
    chats.keep(left, left.chat_id, "", "")
    other = chat_session(chats, "Write a story.", "Once")
    chats.keep(other, other.chat_id, "", "")
    left = chats.open(left.chat_id, "")
    elsewhere = chats.open(left.chat_id, "")
    elsewhere.add(Turn(role="user", content="Written in another tab"))
    elsewhere.keeper.save(elsewhere.tree)
    return left, other


async def test_a_system_prompt_as_typed_is_written_at_most_once_in_a_while(chat_store, monkeypatch):
    """Each keystroke in the system prompt is an event that writes the whole prompt (megabytes, it
    may be): a tab writes it at most once per SETTINGS_INTERVAL, and the last text typed is kept."""
    chats = user_chats(chat_store)
    session = chat_session(chats, "Say apple.", "Apple.")
    chats.keep(session, session.chat_id, "", "")
    written = []
    write = chat_store.set_settings
    monkeypatch.setattr(chat_store, "set_settings", lambda *args: written.append(time.monotonic()) or write(*args))
    monkeypatch.setattr(chat_sidebar, "SETTINGS_INTERVAL", 0.3)
    for typed in ("B", "Be", "Be brief."):
        await chat_sidebar.keep_settings(chats, session.chat_id, typed, "")
    assert chats.find(session.chat_id).system == "Be brief."
    assert len(written) == 3 and all(later - earlier >= 0.3 for earlier, later in zip(written, written[1:])), written


async def test_a_refresh_that_ends_after_a_switch_of_chats_leaves_the_chat_switched_to(chat_store, monkeypatch):
    """The 5 s refresh reads the store in a thread; when the tab switches chats meanwhile, what it
    read of the chat left behind must not be painted over the chat switched to."""
    chats = user_chats(chat_store)
    left, other = chat_written_elsewhere_and_another(chats)
    chats.current = left.chat_id
    reading, switched = asyncio.Event(), asyncio.Event()
    read = left.keeper.written_elsewhere
    loop = asyncio.get_running_loop()

    def slow_read(*args):
        loop.call_soon_threadsafe(reading.set)
        asyncio.run_coroutine_threadsafe(switched.wait(), loop).result()
        return read(*args)

    monkeypatch.setattr(left.keeper, "written_elsewhere", slow_read)
    refreshing = asyncio.create_task(chat_sidebar.refresh_chat(chats, left))
    await reading.wait()
    view = await chat_sidebar.switch_chat(chats, left, left.chat_id, "", "", other.chat_id)
    switched.set()
    assert await refreshing == {}, "the chat left behind was painted over the one switched to"
    assert [t.content for t in view["session"].turns] == ["Write a story.", "Once"]


async def test_a_refresh_that_ends_while_the_tab_switches_chats_paints_nothing(chat_store, monkeypatch):
    """A refresh can start once a switch has stopped the reply it waited for, and end before the
    switch shows the other chat: what it read of the chat being left must not be painted (the
    page could apply it after the switch, leaving the old chat under the new one's title)."""
    chats = user_chats(chat_store)
    left, other = chat_written_elsewhere_and_another(chats)
    loop = asyncio.get_running_loop()
    reading, opening, refreshed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    read, open_chat = left.keeper.written_elsewhere, chats.open

    def slow_read(*args):
        loop.call_soon_threadsafe(reading.set)
        asyncio.run_coroutine_threadsafe(opening.wait(), loop).result()
        return read(*args)

    def slow_open(*args):
        loop.call_soon_threadsafe(opening.set)
        asyncio.run_coroutine_threadsafe(refreshed.wait(), loop).result()
        return open_chat(*args)

    monkeypatch.setattr(left.keeper, "written_elsewhere", slow_read)
    monkeypatch.setattr(chats, "open", slow_open)
    refreshing = asyncio.create_task(chat_sidebar.refresh_chat(chats, left))
    await reading.wait()
    switching = asyncio.create_task(chat_sidebar.switch_chat(chats, left, left.chat_id, "", "", other.chat_id))
    assert await refreshing == {}, "the chat being left was painted while the tab switched"
    refreshed.set()
    view = await switching
    assert [t.content for t in view["session"].turns] == ["Write a story.", "Once"]
    assert left.left and not view["session"].left


async def test_a_reply_the_tab_switched_away_from_is_kept_and_shown_no_more(handlers, chat_store, monkeypatch):
    """A switch waits a while for the reply it stops; a reply that ends later (a busy machine)
    is still saved in its own chat, but paints nothing over the chat the tab shows now."""
    chats = user_chats(chat_store)
    other = chat_session(chats, "Say apple.", "Apple.")
    chats.keep(other, other.chat_id, "", "")
    session = chats.new_session()
    updates = []

    async def reply():
        async for update in handlers.send(session, message("Write a long story about a lighthouse."), **settings(600)):
            updates.append(update)

    task = asyncio.create_task(reply())
    while not (len(session.turns) == 2 and len(session.turns[1].content) > 10):
        assert not task.done(), "the reply ended before it could be watched"
        await asyncio.sleep(0.01)
    monkeypatch.setattr(saved_chat_actions, "STOP_WAIT_SECONDS", 0)
    shown_before = len(updates)
    view = await chat_sidebar.switch_chat(chats, session, session.chat_id, "", "", other.chat_id)
    await task
    assert [t.content for t in view["session"].turns] == ["Say apple.", "Apple."]
    assert not [update for update in updates[shown_before:] if "chatbot" in update], "the reply painted over the chat switched to"
    # Stopped by the switch, the reply can end before the page's cancel of it reaches the server: the
    # page then saves it as any reply that ended, which leaves the title and note shown now alone.
    assert set(chat_sidebar.keep_chat(chats, session, session.chat_id, "", "")) == {"chat_list"}
    kept = chats.open(session.chat_id, "").turns
    assert kept[1].stopped and kept[1].content == session.turns[1].content


async def test_a_switch_that_fails_leaves_the_chat_shown(chat_store, monkeypatch):
    chats = user_chats(chat_store)
    session = chat_session(chats, "Say apple.", "Apple.")
    chats.keep(session, session.chat_id, "", "")
    with pytest.warns(UserWarning, match="too late|Too late|no longer"):
        undone = await chat_sidebar.undo_delete(chats, session, session.chat_id, "", "")
    assert "session" not in undone and not session.left, "nothing to undo: the chat stays shown"

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(chats, "open", broken)
    with pytest.raises(gr.Error, match="cannot be reached now"):
        await chat_sidebar.switch_chat(chats, session, session.chat_id, "", "", "x")
    assert not session.left


async def test_a_reply_that_cannot_begin_is_taken_out_and_the_chat_keeps_the_reason(handlers, chat_store, upload_folder):
    chats = user_chats(chat_store)
    session = chats.new_session()
    session.add(Turn(role="user", content="Look", files=[str(picture(upload_folder / "r" / "red.png", "red"))]))
    session.add(Turn(role="assistant", content="Red."))
    chats.keep(session, session.chat_id, "", "")
    # The text model refuses the image of the first message once asked again, after the reply's turn was added.
    await run(handlers.send(session, message("Thanks!"), **settings(4)))
    assert [t.role for t in session.turns] == ["user", "assistant", "user"] and "does not accept images" in session.turns[-1].error
    assert len(session.tree) == 3, "the reply's turn is out of the tree"
    stored = chat_store.tree(chats.owner, session.chat_id)
    assert [(m.data["content"], m.state) for m in stored.messages] == [("Look", "done"), ("Red.", "done"), ("Thanks!", "error")]
    assert session.keeper.rows == [m.id for m in stored.messages]


async def test_a_reply_written_in_this_tab_is_nothing_new_to_it(handlers, chat_store):
    chats = user_chats(chat_store)
    session = chats.new_session()
    await run(handlers.send(session, message("Say apple."), **settings(4)))
    await run(handlers.regenerate(session, **settings(4, temperature=1.0, seed=3)))
    assert session.turns[-1].stats is not None and len(versions_of(session, -1)) == 2
    assert await chat_sidebar.refresh_chat(chats, session) == {}, "the tab would redraw its own reply"


async def test_a_chat_deleted_in_another_tab_stays_on_screen_and_is_saved_again_as_a_new_chat(chat_store):
    chats, elsewhere = user_chats(chat_store), user_chats(chat_store)
    here = chat_session(chats, "Hi", "Hello")
    chats.keep(here, here.chat_id, "", "")
    deleted = here.chat_id
    assert elsewhere.delete(deleted)
    updates = await chat_sidebar.refresh_chat(chats, here)
    assert updates["note"] == said("sidebar.deleted_elsewhere") and updates["shown"] == here.chat_id != deleted
    assert [t.content for t in here.turns] == ["Hi", "Hello"] and chats.find(here.chat_id) is None, "saved at its next message"
    here.add(Turn(role="user", content="Still here?"))
    chats.keep(here, here.chat_id, "", "")
    assert [m.data["content"] for m in chat_store.tree(chats.owner, here.chat_id).messages] == ["Hi", "Hello", "Still here?"]
    assert [chat_id for _, chat_id in chats.choices()] == [here.chat_id]
    assert elsewhere.undo_delete() == deleted, "the other tab's Undo still brings it back"
    assert [m.data["content"] for m in chat_store.tree(chats.owner, deleted).messages] == ["Hi", "Hello"], "as it was deleted"


def test_a_tab_that_opened_a_reply_being_written_elsewhere_never_writes_its_copy_over_it(chat_store):
    chats = user_chats(chat_store)
    writer = chat_session(chats, "Tell me a story", "Once")
    writer.turns[1].writing = True
    writer.keeper.save(writer.tree)
    reader = chats.open(writer.chat_id, "")
    assert reader.turns[1].stopped, "shown as stopped where it was opened"
    writer.turns[1].writing, writer.turns[1].content = False, "Once upon a time, the end."
    writer.keeper.save(writer.tree)
    reader.add(Turn(role="user", content="Nice"))
    reader.keeper.save(reader.tree)
    assert [(m.data["content"], m.state) for m in chat_store.tree(chats.owner, writer.chat_id).messages] == [
        ("Tell me a story", "done"), ("Once upon a time, the end.", "done"), ("Nice", "done")]


def picture(path, color):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path)
    return path


def test_media_are_kept_with_the_chat_once_by_content_and_go_with_the_last_chat(chat_store, upload_folder, tmp_path):
    kept = picture(upload_folder / "abc" / "kept.png", "red")
    gone = upload_folder / "abc" / "gone.png"
    outside = picture(tmp_path / "outside.png", "blue")
    link = upload_folder / "abc" / "link.png"
    link.symlink_to(outside)
    chats = user_chats(chat_store)
    turn = Turn(role="user", content="Look", files=[str(kept), str(gone), str(outside), str(link), "/etc/hostname"])
    a = chats.add(MessageTree.line([turn]))
    [medium] = chat_store.media_of(chats.owner)
    assert chat_store.media.file(medium).read_bytes() == kept.read_bytes()
    kept.unlink()  # Gradio deletes the page's files after a while: the chat keeps its own copy

    session = chats.open(a.chat_id, str(upload_folder))
    [opened] = session.turns
    [copy] = opened.files
    assert copy.startswith(str(upload_folder)) and copy.endswith("/kept.png") and Image.open(copy).getpixel((0, 0)) == (255, 0, 0)
    # A file that is gone, or not one the page stored (a path elsewhere, a link out), is neither kept nor read.
    assert opened.missing_files == ["gone.png", "outside.png", "link.png", "hostname"]
    assert sorted(path.name for path in chat_store.media.root.rglob("*") if path.is_file()) == [medium]
    shown = render(session.tree)
    assert shown[0]["content"] == [{"path": copy}, "Look"]
    assert shown[1]["metadata"]["title"] == "📎 Missing files" and "gone.png, outside.png" in shown[1]["content"]
    request = model_request(session.turns)
    assert request.messages == [{"role": "user", "content": "<image>Look"}] and request.media == {"image": [copy]}
    # A message whose only file is gone still shows.
    b = chats.add(MessageTree.line([Turn(role="user", files=[str(gone)])]))
    assert render(chats.open(b.chat_id, str(upload_folder)).tree)[0]["content"] == ["📎 gone.png"]

    # A long-open chat whose page copies Gradio deleted gets them back from the store, and keeps them kept.
    Path(copy).unlink()
    session.keeper.restore_media(session.turns)
    assert Path(session.turns[0].files[0]).read_bytes() == chat_store.media.file(medium).read_bytes()
    fresh = chats.new_session()
    fresh.add(Turn(role="user", content="New", files=[str(picture(upload_folder / "n" / "new.png", "green"))]))
    fresh.keeper.save(fresh.tree)
    Path(fresh.turns[0].files[0]).unlink()
    fresh.keeper.restore_media(fresh.turns)
    fresh.keeper.save(fresh.tree)
    assert Image.open(fresh.turns[0].files[0]).getpixel((0, 0)) == (0, 128, 0)
    assert isinstance(chat_store.tree(chats.owner, fresh.chat_id).messages[0].data["files"][0], dict), "still kept as a medium"
    chats.delete(fresh.chat_id)
    chat_store.purge(time.time())  # as it is once Undo's time is over

    # The same picture in another chat (under another name) is kept once, and goes with the last chat using it.
    again = chats.add(MessageTree.line([Turn(role="user", content="Again", files=[str(picture(upload_folder / "x" / "same.png", "red"))])]))
    assert list(chat_store.media_of(chats.owner)) == [medium]
    chats.delete(a.chat_id)
    assert chat_store.media.file(medium).exists()
    chats.delete(again.chat_id)
    assert chat_store.media.file(medium).exists(), "kept while the delete can be undone"
    chat_store.purge(time.time())
    assert not chat_store.media.file(medium).exists() and chat_store.media_of(chats.owner) == {}


async def test_a_delete_is_undone_within_its_time_and_until_the_next_delete(chat_store, upload_folder, monkeypatch):
    chats = user_chats(chat_store)
    a = chats.add(MessageTree.line([Turn(role="user", content="Apple?"), Turn(role="assistant", content="Red.")]), system="Be brief.")
    b = chats.add(MessageTree.line([Turn(role="user", content="Banana?")]))
    shown = chats.open(b.chat_id, str(upload_folder))
    view = await chat_sidebar.delete_chat(chats, shown)
    assert view["undo"]["visible"] and "Deleted “Banana?”" in view["note"] and view["shown"] == a.chat_id
    assert [chat_id for _, chat_id in chats.choices()] == [a.chat_id]
    view = await chat_sidebar.undo_delete(chats, view["session"], a.chat_id, "Be brief.", "")
    assert view["shown"] == b.chat_id and [t.content for t in view["session"].turns] == ["Banana?"] and not view["undo"]["visible"]
    assert sorted(chat_id for _, chat_id in chats.choices()) == sorted([a.chat_id, b.chat_id])
    with pytest.warns(UserWarning, match="can no longer be undone"):
        assert "session" not in await chat_sidebar.undo_delete(chats, view["session"], b.chat_id, "", ""), "nothing to undo twice"

    # The next delete purges the one before: only the last can be undone, and a tab's Undo names no chat but its own.
    await chat_sidebar.delete_chat(chats, chats.open(a.chat_id, str(upload_folder)))
    other_tab = user_chats(chat_store)
    await chat_sidebar.delete_chat(other_tab, other_tab.open(b.chat_id, str(upload_folder)))
    with pytest.warns(UserWarning, match="can no longer be undone"):
        await chat_sidebar.undo_delete(chats, chats.new_session(), "", "", "")
    assert chats.choices() == []
    # Past its time, a delete is purged by whoever comes next, and Undo says it is too late.
    monkeypatch.setattr(time, "time", lambda real=time.time: real() + 11)
    chats.purge_expired()
    with pytest.warns(UserWarning, match="can no longer be undone"):
        await chat_sidebar.undo_delete(other_tab, other_tab.new_session(), "", "", "")
    with chat_store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM chats").scalar() == 0


def noise(path):
    """A picture of about 4.9 KB: noise does not compress."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.frombytes("RGB", (40, 40), os.urandom(4800)).save(path)
    return path


def test_a_user_over_the_media_quota_is_told_and_the_chat_is_kept(tmp_path, upload_folder):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", Quota(media=6000), data=tmp_path)
    try:
        chats = user_chats(store)
        first, second = noise(upload_folder / "a" / "first.png"), noise(upload_folder / "b" / "second.png")
        chats.add(MessageTree.line([Turn(role="user", content="One", files=[str(first)])]))
        with pytest.warns(UserWarning, match=r"second.png is not kept with the chat: your saved chats' media would take 9.\d KB, over "
                                             r"this server's limit of 5.9 KB per user \(--max-user-media-size\)"):
            two = chats.add(MessageTree.line([Turn(role="user", content="Two", files=[str(second)])]))
        assert len(store.media_of(chats.owner)) == 1
        opened = chats.open(two.chat_id, str(upload_folder)).turns
        assert [t.content for t in opened] == ["Two"] and opened[0].files == [str(second)], "saved, its file named by its path"
        # Another user has a quota of their own.
        other = user_chats(store, "login:bob")
        other.add(MessageTree.line([Turn(role="user", content="Mine", files=[str(second)])]))
        assert len(store.media_of("login:bob")) == 1
    finally:
        store.close()


def test_chats_past_the_chats_quota_stay_on_the_page_and_say_so(tmp_path, upload_folder):
    """Old browser chats move in up to the quota, and the note says which did not; an imported
    conversation past it is shown, unsaved, with a warning that says why, and saved once there is room."""
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", Quota(chats=2), data=tmp_path)
    try:
        old = {"chats": [{"id": str(n), "title": f"Old {n}", "turns": [{"role": "user", "content": f"Hi {n}"}]} for n in range(3)]}
        view = sidebar_over(store).restore({"id": "e" * 32}, old)
        assert [title for title, _ in view["chats"].choices()] == ["Old 1", "Old 2"]
        assert re.search(r"Moved 2 chats from this browser to the server\. The newest was not: you would have 3 saved chats, over "
                         r"this server's limit of 2 per user \(--max-user-chats\)", view["note"]), view["note"]
        chats = view["chats"]
        imported = ChatSession(tree=MessageTree.line([Turn(role="user", content="Imported"), Turn(role="assistant", content="Kept on the page.")]))
        with pytest.warns(UserWarning, match=r"This chat is not saved: you would have 3 saved chats.*saved as soon as there is room"):
            shown = chat_sidebar.keep_import(chats, imported, "")
        session = shown["session"]
        assert [t.content for t in session.turns] == ["Imported", "Kept on the page."] and chats.find(session.chat_id) is None
        chats.delete(chats.choices()[-1][1])
        chats.keep(session, session.chat_id, "", "")
        assert [t.content for t in chats.open(session.chat_id, str(upload_folder)).turns] == ["Imported", "Kept on the page."]
    finally:
        store.close()


def test_the_secret_is_made_once_and_kept(tmp_path):
    secret = page_secret(tmp_path)
    assert len(secret) >= 32 and page_secret(tmp_path) == secret
    assert (tmp_path / "browser-state-secret").stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["browser-state-secret"]
    assert page_secret(tmp_path / "other") != secret


def test_a_browser_id_that_is_not_one_gets_a_new_one():
    browser, current = browser_memory({"id": "b" * 32, "current": "c1"})
    assert (browser, current) == ("b" * 32, "c1")
    for stored in (None, {"id": "../../x"}, {"id": "B" * 32}, {"id": 7, "current": 3}, []):
        browser, current = browser_memory(stored)
        assert len(browser) == 32 and browser != "b" * 32 and current == ""


def sidebar_over(store, export_limit=100 * 2**20, **limits):
    """The sidebar's handlers over ``store``, without a page around them."""
    sidebar = chat_sidebar.ChatSidebar.__new__(chat_sidebar.ChatSidebar)
    sidebar.store, sidebar.limits, sidebar.setting_names = store, Limits(max_upload_size=export_limit, **limits), CONTROLS
    return sidebar


def test_all_of_a_users_chats_export_as_conversation_files_that_import(chat_store, upload_folder, loaded_models):
    chats = user_chats(chat_store)
    chats.add(MessageTree.line([Turn(role="user", content="Look", files=[str(picture(upload_folder / "a" / "red.png", "red"))]),
               Turn(role="assistant", content="Red.")]), system="Be brief.")
    chats.add(MessageTree.line([Turn(role="user", content="Say: hi/there?"), Turn(role="assistant", content="hi")]))
    noisy = noise(upload_folder / "n" / "noise.png")
    chats.add(MessageTree.line([Turn(role="user", content="Too big", files=[str(noisy)])]))
    user_chats(chat_store, "login:bob").add(MessageTree.line([Turn(role="user", content="Bob's secret")]))

    with pytest.warns(UserWarning, match="Left out of the export: Too big: With its media the conversation is over 5.9 KB"):
        exported = sidebar_over(chat_store, export_limit=6000).export_all(chats)
    with zipfile.ZipFile(exported["value"]) as archive:
        names = archive.namelist()
        assert names == ["002 Say_ hi_there_.json", "003 Look.json"], "numbered as listed, newest first"
        archive.extractall(upload_folder / "unzipped")
    handlers = ChatHandlers(loaded_models, CONTROLS)
    session = ChatSession()
    assert handlers.import_(session, str(upload_folder / "unzipped" / names[1]))["system"] == "Be brief."
    assert [t.content for t in session.turns] == ["Look", "Red."]
    assert Image.open(session.turns[0].files[0]).getpixel((0, 0)) == (255, 0, 0)
    assert "Bob's secret" not in json.dumps([(upload_folder / "unzipped" / name).read_text() for name in names])


def test_an_export_of_all_chats_is_bounded_by_what_a_users_chats_may_keep(chat_store, upload_folder):
    """One picture named in every message of several chats: each chat's file carries its own copy
    (a 1 MB upload named 70 times in 4 chats made a 283 MB export). Chats that would take the
    export over the user's media quota are left out by name."""
    chats = user_chats(chat_store)
    picture_path = str(noise(upload_folder / "n" / "noise.png"))
    for number in range(3):
        chats.add(MessageTree.line([Turn(role="user", content=f"Look {number}", files=[picture_path] * 3)]))
    with zipfile.ZipFile(sidebar_over(chat_store).export_all(chats)["value"]) as archive:
        sizes = [member.file_size for member in archive.infolist()]
    assert len(sizes) == 3 and min(sizes) > 3 * os.path.getsize(picture_path), "each chat carries each copy"
    sidebar = sidebar_over(chat_store, max_user_media_size=sizes[0] + sizes[1] + sizes[2] // 2)
    with pytest.warns(UserWarning, match=r"Left out of the export: Look 0: with it the export would be over .* \(--max-user-media-size\)"):
        exported = sidebar.export_all(chats)
    with zipfile.ZipFile(exported["value"]) as archive:
        assert archive.namelist() == ["001 Look 2.json", "002 Look 1.json"]


def test_all_chats_import_back_at_once_as_new_chats_of_the_importing_user(chat_store, upload_folder):
    alice = user_chats(chat_store, "login:alice")
    alice.add(MessageTree.line([Turn(role="user", content="Look", files=[str(picture(upload_folder / "a" / "red.png", "red"))]),
               Turn(role="assistant", content="Red.")]), system="Be brief.")
    alice.add(MessageTree.line([Turn(role="user", content="Say hi"), Turn(role="assistant", content="hi")]))
    exported = sidebar_over(chat_store).export_all(alice)["value"]
    with zipfile.ZipFile(exported, "a") as archive:
        archive.writestr("004 broken.json", "{not json")
    bob = user_chats(chat_store, "login:bob")
    shown = bob.new_session().chat_id
    with pytest.warns(UserWarning, match=r"Left out of the import: 004 broken.json: This is not an anychat conversation file"):
        view = sidebar_over(chat_store).import_all(bob, exported)
    assert view["note"] == "Imported 2 chats from chats.zip." and bob.current == shown
    assert [title for title, _ in bob.choices()] == ["Say hi", "Look"], "in the order they were exported"
    [(_, look)] = bob.choices("look")
    assert bob.find(look).system == "Be brief." and look not in [chat_id for _, chat_id in alice.choices()]
    opened = bob.open(look, str(upload_folder)).turns
    assert [t.content for t in opened] == ["Look", "Red."] and Image.open(opened[0].files[0]).getpixel((0, 0)) == (255, 0, 0)
    assert len(alice.choices()) == 2, "the exporting user's chats are as they were"


def archive_of(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return str(path)


@pytest.mark.parametrize("members, limits, refusal", [
    (None, {}, "This is not an archive of chats: Import chats takes the ZIP that Export all chats writes"),
    ({"../../evil.json": "{}"}, {}, r"holds '../../evil.json', which is not a conversation file of its own.*no folders or paths"),
    ({"chats/001 a.json": "{}"}, {}, "which is not a conversation file of its own"),
    ({"/etc/cron.d/x.json": "{}"}, {}, "which is not a conversation file of its own"),
    ({"notes.txt": "hi"}, {}, "holds only .json files"),
    ({f"{n:04d}.json": "{}" for n in range(5)}, {"max_import_chats": 4}, r"holds 5 files, over this server's limit of 4 chats imported at once \(--max-import-chats\)"),
    ({"bomb.json": "0" * 2_000_000}, {}, r"'bomb.json' unpacks to 1.9 MB, over this server's limit of 1 MB for a conversation file"),
    ({f"{n}.json": "0" * 600_000 for n in range(4)}, {"max_user_media_size": 2_000_000}, r"unpacks to 2.3 MB, more than the 1.9 MB one user's"),
])
def test_an_archive_of_chats_that_is_not_one_is_refused_before_anything_is_imported(chat_store, upload_folder, tmp_path, members, limits, refusal):
    path = tmp_path / "chats.zip"
    if members is None:
        path.write_bytes(picture(tmp_path / "red.png", "red").read_bytes())
    else:
        archive_of(path, members)
    chats = user_chats(chat_store)
    with pytest.raises(gr.Error, match=f"Could not import chats.zip: .*{refusal}"):
        sidebar_over(chat_store, export_limit=2**20, **limits).import_all(chats, str(path))
    assert chats.choices() == [] and not list(upload_folder.glob("anychat-import-*"))


def test_an_archive_of_a_hundred_thousand_files_is_refused_before_its_directory_is_read(chat_store, upload_folder, tmp_path):
    """Its directory would take some 50 MB to read (two million entries, in an upload's 100 MB, a
    gigabyte): the count its end record declares is checked first."""
    import tracemalloc

    path = tmp_path / "chats.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for number in range(100_000):
            archive.writestr(f"{number}.json", b"")
    chats = user_chats(chat_store)
    tracemalloc.start()
    try:
        with pytest.raises(gr.Error, match=r"holds 100000 files, over this server's limit of 1000 chats imported at once"):
            sidebar_over(chat_store, export_limit=100 * 2**20).import_all(chats, str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20, f"refusing it took {peak / 2**20:.0f} MiB"


def test_a_zip_bomb_whose_directory_lies_about_its_size_is_read_no_further_than_it_says(chat_store, upload_folder, tmp_path):
    path = tmp_path / "chats.zip"
    archive_of(path, {"001 bomb.json": "0" * 50_000_000})
    data = bytearray(path.read_bytes())
    for header, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # the local header's size, then the directory's
        start = data.index(header)
        data[start + size_at:start + size_at + 4] = (100).to_bytes(4, "little")
    path.write_bytes(data)
    chats = user_chats(chat_store)
    with pytest.warns(UserWarning, match=r"Left out of the import: 001 bomb.json: it is damaged in the archive"):
        assert sidebar_over(chat_store).import_all(chats, str(path))["note"] == "Imported 0 chats from chats.zip."
    assert chats.choices() == []


async def test_a_preset_keeps_the_system_prompt_and_settings_and_a_reply_is_written_with_them(handlers, chat_store):
    alice = user_chats(chat_store, "login:alice")
    alice.setting_names = CONTROLS
    page = {name: value for name, value in settings(3).items() if name in CONTROLS}
    saved = chat_presets.save_preset(alice, "  Terse \n one ", "Answer in one word.", **page)
    assert saved["preset_name"] == "Terse one" and saved["preset_list"]["choices"] == ["Terse one"]
    chat_presets.save_preset(alice, "Long", "Tell stories.", **{**page, "max_new_tokens": 64})
    view = chat_presets.apply_preset(alice, "Terse one")
    assert view["system"] == "Answer in one word." and view["max_new_tokens"] == 3 and view["temperature"] == 0.0
    assert set(view) == {"system", "preset_name", *CONTROLS}, "every setting the page has a control for, and only those"
    # The page sends its controls as the preset set them: the reply is written with them.
    session = alice.new_session()
    await run(handlers.send(session, message("Tell me a long story."), **{**settings(), **{name: view[name] for name in CONTROLS},
                                                                        "system": view["system"]}))
    assert session.turns[-1].stats.tokens == 3 and session.turns[-1].stats.finish_reason == "length"

    with pytest.raises(gr.Error, match="The preset was not saved: .*temperature"):
        chat_presets.save_preset(alice, "Hot", "", **{**page, "temperature": 9})
    with pytest.raises(gr.Error, match="A preset needs a name"):
        chat_presets.save_preset(alice, "   ", "", **page)
    with pytest.raises(gr.Error, match="at most 100 characters"):
        chat_presets.save_preset(alice, "x" * 101, "", **page)
    assert chat_presets.list_presets(alice)["preset_list"]["choices"] == ["Long", "Terse one"]

    bob = user_chats(chat_store, "login:bob")
    assert chat_presets.list_presets(bob)["preset_list"]["choices"] == []
    with pytest.raises(gr.Error, match="You have no preset named “Terse one”"):
        chat_presets.apply_preset(bob, "Terse one")
    with pytest.raises(gr.Error, match="no preset named"):
        chat_presets.delete_preset(bob, "Terse one")
    assert chat_presets.delete_preset(alice, "Terse one")["preset_list"]["choices"] == ["Long"]
    with pytest.raises(gr.Error, match="has not finished opening"):
        chat_presets.apply_preset(None, "Long")


def test_the_chats_a_browser_held_move_into_the_store_once(chat_store, upload_folder):
    old = {"current": "b", "chats": [
        {"id": "b", "title": "Renamed", "system": "Be kind.", "updated": 2.0,
         "turns": [{"role": "user", "content": "Second"}, {"role": "assistant", "content": "Two", "stopped": True}]},
        {"id": "a", "title": "First", "updated": 1.0, "turns": [{"role": "user", "content": "First"}]},
    ]}
    sidebar = sidebar_over(chat_store)
    view = sidebar.restore({"id": "c" * 32}, old)
    assert view["old_chats"] is None, "the browser's copy is removed once moved"
    assert "Moved 2 chats from this browser" in view["note"]
    assert [title for title, _ in view["chats"].choices()] == ["Renamed", "First"]
    assert [t.content for t in view["session"].turns] == ["Second", "Two"] and view["session"].turns[1].stopped
    assert view["system"] == "Be kind." and view["storage"] == {"id": "c" * 32, "current": view["session"].chat_id}
    again = sidebar.restore(view["storage"], None)
    assert again["old_chats"] is not None and len(again["chats"].choices()) == 2
    assert [t.content for t in again["session"].turns] == ["Second", "Two"], "the page opens on the chat it showed last"
    # A request naming more old chats than an import may hold moves the newest of them only.
    many = {"chats": [{"id": str(n), "title": f"Old {n}", "turns": [{"role": "user", "content": "Hi"}]} for n in range(5)]}
    capped = sidebar_over(chat_store, max_import_chats=3).restore({"id": "e" * 32}, many)
    assert [title for title, _ in capped["chats"].choices()] == ["Old 0", "Old 1", "Old 2"]
    assert "Moved 3 chats from this browser" in capped["note"] and "The 2 oldest were left out" in capped["note"], capped["note"]
    broken = sidebar.restore({"id": "d" * 32}, {"chats": [{"id": "a", "title": "x", "turns": [{"role": "robot"}]}]})
    assert broken["note"].startswith("⚠ The chats saved in this browser could not be read (chats.0.turns.0.role")
    assert broken["chats"].choices() == []


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
    assert [t.role for t in session.turns] == ["user", "assistant"] and session.reply.answering
    handlers.stop(session)
    await task
    assert not session.reply.answering and session.turns[-1].stopped
    await run(handlers.send(session, message("And a poem?"), **settings(4)))
    assert [t.content for t in session.turns if t.role == "user"] == ["Write a long story about a dragon.", "And a poem?"]


async def test_switching_chats_stops_the_reply_and_keeps_it_in_its_own_chat(handlers, chat_store, upload_folder):
    chats = user_chats(chat_store)
    first = chats.new_session()
    await run(handlers.send(first, message("Say apple."), **settings(4, system="Be brief.")))
    chat_sidebar.keep_chat(chats, first, first.chat_id, "Be brief.", "", **{name: value for name, value in settings(4).items()
                                                                             if name in CONTROLS})
    second = (await chat_sidebar.new_chat(chats, first, first.chat_id, "Be brief.", ""))["session"]
    task = await started_reply(handlers, second, "Write a long story about a lighthouse.")

    chats.setting_names = CONTROLS
    view = await chat_sidebar.switch_chat(chats, second, second.chat_id, "Be long.", "", first.chat_id)
    assert view["max_new_tokens"] == 4 and view["temperature"] == 0.0, "the chat's generation settings come back with it"
    assert task.done() and not second.reply.answering, "the switch waits for the reply to stop"
    shown = view["session"]
    assert shown is not second and shown.chat_id == first.chat_id == view["shown"]
    assert [t.content for t in shown.turns][0] == "Say apple." and view["system"] == "Be brief." and view["chatbot"] == render(shown.tree)
    assert chats.find(second.chat_id).system == "Be long."
    kept = chats.open(second.chat_id, str(upload_folder)).turns
    assert kept[0].content == "Write a long story about a lighthouse."
    assert kept[1].stopped and kept[1].content == second.turns[1].content
    assert len(second.turns[1].content) < 2000, "the reply went on after the switch"


async def test_the_message_is_saved_when_sent_and_the_reply_as_it_streams(handlers, chat_store):
    chats = user_chats(chat_store)
    session = chats.new_session()
    task = await started_reply(handlers, session, "Write a long story about a dragon.")
    rows = chat_store.tree(chats.owner, session.chat_id).messages
    assert rows[0].data["content"] == "Write a long story about a dragon.", "the message is saved before its reply"
    assert chats.find(session.chat_id).title == "Write a long story about a dragon."
    deadline = asyncio.get_running_loop().time() + 30
    while len(rows) < 2 or len(rows[1].data["content"]) < 20:
        assert asyncio.get_running_loop().time() < deadline and not task.done(), "the reply was not saved while it streamed"
        await asyncio.sleep(0.2)
        rows = chat_store.tree(chats.owner, session.chat_id).messages
    assert rows[1].state == "writing" and session.turns[1].content.startswith(rows[1].data["content"])
    handlers.stop(session)
    await task
    [asked, reply] = chat_store.tree(chats.owner, session.chat_id).messages
    assert reply.state == "stopped" and reply.data["content"] == session.turns[1].content
    assert reply.data["stats"]["finish_reason"] == "stopped"
    await run(handlers.send(session, message("Write a poem about the sea."), **settings(2)))
    assert session.turns[-1].stats.finish_reason == "length"
    assert chat_store.tree(chats.owner, session.chat_id).messages[-1].state == "length"


async def test_regenerate_and_edit_keep_versions_and_the_next_message_continues_the_branch_shown(handlers, chat_store, monkeypatch):
    chats = user_chats(chat_store)
    session = chats.new_session()
    await run(handlers.send(session, message("Name a fruit."), **settings(6, temperature=1.0, seed=1)))
    for seed in (2, 3):
        await run(handlers.regenerate(session, **settings(6, temperature=1.0, seed=seed)))
    versions = versions_of(session, 1)
    assert len(versions) == 3 and versions[-1] == session.tree.shown, "each regenerated reply is a version"
    stored = {m.id: m.data["content"] for m in chat_store.tree(chats.owner, session.chat_id).messages}
    replies = {place: stored[session.keeper.rows[place]] for place in versions}
    assert len(set(replies.values())) > 1, "the sampled replies were all alike: the test cannot tell them apart"
    assert "3/3" in str(render(session.tree)[-1]["content"])

    shown = handlers.switch_version(session, str(versions[0]))
    assert session.tree.branch() == [0, versions[0]] and "1/3" in str(shown["chatbot"][-1]["content"])
    assert chat_store.tree(chats.owner, session.chat_id).branch() == [0, versions[0]], "the chat shows that branch from now on"
    requests = []
    model = handlers.loaded_models.model
    astream_reply = model.astream_reply
    monkeypatch.setattr(model, "astream_reply", lambda request, **kw: requests.append(request) or astream_reply(request, **kw))
    await run(handlers.send(session, message("And a vegetable?"), **settings(4)))
    assert [m["content"] for m in requests[0].messages if m["role"] == "assistant"] == [replies[versions[0]]], \
        "the model gets the branch shown"
    # Reopened (a reload, another tab), the chat shows that branch, with its ‹1/3›.
    reopened = chats.open(session.chat_id, "")
    assert [t.content for t in reopened.turns] == [t.content for t in session.turns] and versions_of(reopened, 1) == versions

    # An edit is a new version of the message; the earlier one stays, with its replies.
    await run(handlers.edit(reopened, SimpleNamespace(index=0, value="Name a berry.", previous_value="Name a fruit."), **settings(4)))
    assert [t.content for t in reopened.turns][0] == "Name a berry." and len(reopened.turns) == 2
    first, edited = versions_of(reopened, 0)
    assert edited == reopened.tree.branch()[0]
    back = handlers.switch_version(reopened, str(first))
    assert [t.content for t in reopened.turns] == [t.content for t in session.turns] and back["chatbot"] == render(reopened.tree)
    # A place past the chat's messages (a page that went on showing a chat changed since) is no version.
    with pytest.warns(UserWarning, match="no such version"):
        handlers.switch_version(reopened, str(len(reopened.tree)))
    assert [t.content for t in reopened.turns] == [t.content for t in session.turns]

    # Stopped mid-regenerate, the partial reply is a version of its own, saved as stopped.
    task = asyncio.create_task(run(handlers.regenerate(reopened, **settings(600))))
    while not (reopened.turns[-1].writing and len(reopened.turns[-1].content) > 10):
        assert not task.done(), "the reply ended before it could be stopped"
        await asyncio.sleep(0.01)
    handlers.stop(reopened)
    await task
    stopped = reopened.turns[-1]
    assert stopped.stopped and len(versions_of(reopened, -1)) == 2 and versions_of(reopened, -1)[-1] == reopened.tree.shown
    row = reopened.keeper.rows[reopened.tree.shown]
    assert next(m.state for m in chat_store.tree(chats.owner, session.chat_id).messages if m.id == row) == "stopped"

    # Undo takes the last exchange away, with the other versions after it; Clear, every version.
    handlers.undo(reopened)
    chats.keep(reopened, reopened.chat_id, "", "")
    assert [t.content for t in chats.open(session.chat_id, "").turns] == ["Name a fruit.", replies[versions[0]]]
    handlers.clear(reopened)
    chats.keep(reopened, reopened.chat_id, "", "")
    assert chat_store.tree(chats.owner, session.chat_id).messages == []


async def test_continue_writes_on_the_cut_reply_in_the_same_message_and_keeps_it(handlers, chat_store, loaded_models):
    chats = user_chats(chat_store)
    session = chats.new_session()
    asked = "Write a long story about a dragon."
    await run(handlers.send(session, message(asked), **settings(8)))
    first_part = session.turns[1].model_copy()
    assert first_part.stats.finish_reason == "length"

    updates = await run(handlers.continue_reply(session, **settings(8)))
    [whole] = loaded_models.model.chat([{"role": "user", "content": asked}], temperature=0, max_new_tokens=16)
    assert [t.role for t in session.turns] == ["user", "assistant"]
    reply = session.turns[1]
    assert reply.content == whole.response_text, "the model went on from where the reply ended"
    shown = [update["chatbot"] for update in updates]
    assert all(chat[0]["role"] == "user" and chat[1]["content"].startswith(first_part.content.strip()) for chat in shown)
    assert len(shown) > 3 and all(len(chat) == 2 for chat in shown[1:-1]), "the reply grew in place, without stats until it ended"
    assert (reply.stats.tokens, reply.stats.finish_reason) == (16, "length")
    assert reply.stats.first_token_seconds == first_part.stats.first_token_seconds
    assert shown[-1][-1]["content"] == f'<span class="reply-stats">{reply.stats.line()}</span>'
    [_, row] = chat_store.tree(chats.owner, session.chat_id).messages
    assert row.data["content"] == whole.response_text and row.state == "length" and row.data["stats"]["tokens"] == 16

    # Stop works on a continued reply too: what was written stays, counted as stopped.
    task = asyncio.create_task(run(handlers.continue_reply(session, **settings(600))))
    while len(session.turns[1].content) < len(whole.response_text) + 20:
        assert not task.done(), "the continued reply ended before it could be stopped"
        await asyncio.sleep(0.01)
    handlers.stop(session)
    await task
    assert session.turns[1].stopped and session.turns[1].content.startswith(whole.response_text)
    assert session.turns[1].stats.finish_reason == "stopped" and session.turns[1].stats.tokens > 16

    # A reply format cannot hold a reply that starts mid-text: refused, the reply as it was.
    before = session.turns[1].model_dump()
    with pytest.warns(UserWarning, match="Could not continue the reply: A reply format"):
        await run(handlers.continue_reply(session, **settings(8, reply_format="json_object")))
    assert session.turns[1].model_dump() == before and not session.turns[0].error
    # No reply to continue: said so, nothing changes.
    session.add(Turn(role="user", content="And then?"))
    with pytest.warns(UserWarning, match="There is no reply to continue"):
        refused = await run(handlers.continue_reply(session, **settings()))
    assert refused == [{"chatbot": render(session.tree)}] and len(session.turns) == 3


def chat_shape(store, owner, chat_id):
    """Every message of a chat (role, content, the place of the one it follows), in the order
    written, and the places of the branch it shows: what an export and import must keep."""
    tree = store.tree(owner, chat_id)
    return [(m.data["role"], m.data["content"], parent) for m, parent in zip(tree.messages, tree.parents)], tree.branch()


async def test_a_chat_exports_and_imports_with_every_version_of_its_messages(handlers, chat_store, upload_folder, tmp_path):
    chats = user_chats(chat_store)
    session = chats.new_session()
    await run(handlers.send(session, message("Name a fruit."), **settings(6, temperature=1.0, seed=1)))
    for seed in (2, 3):
        await run(handlers.regenerate(session, **settings(6, temperature=1.0, seed=seed)))
    await run(handlers.edit(session, SimpleNamespace(index=0, value="Name a berry.", previous_value="Name a fruit."), **settings(4)))
    chats.keep(session, session.chat_id, "Be brief.", "")
    shape = chat_shape(chat_store, chats.owner, session.chat_id)
    assert [parent for _, _, parent in shape[0]] == [None, 0, 0, 0, None, 4] and shape[1] == [4, 5]

    exported = handlers.export(session, "Be brief.")["value"]
    saved = json.loads(Path(exported).read_text())
    assert [t["content"] for t in saved["turns"]] == ["Name a berry.", session.turns[1].content], "turns: the branch shown, as before"
    assert sum("turn" in node for node in saved["tree"]) == 2, "the branch shown is in the tree by its place in turns, not twice"
    markdown = Path(handlers.export_markdown(session, "Be brief.")["value"]).read_text()
    assert "The branch shown only: 1 of its messages has other versions" in markdown
    assert "Name a fruit." not in markdown

    bob = user_chats(chat_store, "login:bob")
    imported = ChatSession()
    handlers.import_(imported, exported)
    view = chat_sidebar.keep_import(bob, imported, "Be brief.")
    copy = view["session"]
    assert chat_shape(chat_store, bob.owner, copy.chat_id) == shape and bob.find(copy.chat_id).system == "Be brief."
    assert "1/1" not in str(view["chatbot"]) and "2/2" in str(view["chatbot"][0:2])
    # Switching versions works on the copy as on the original: the first message's first version, with its third reply.
    handlers.switch_version(session, str(versions_of(session, 0)[0]))
    shown = handlers.switch_version(copy, str(versions_of(copy, 0)[0]))
    assert [t.content for t in copy.turns] == [t.content for t in session.turns] == ["Name a fruit.", shape[0][3][1]]
    assert "3/3" in str(shown["chatbot"][-1]["content"]) and len(versions_of(copy, 1)) == 3

    # The archive of all chats keeps every version too.
    archive = sidebar_over(chat_store).export_all(chats)["value"]
    carol = user_chats(chat_store, "login:carol")
    sidebar_over(chat_store).import_all(carol, archive)
    [(_, chat_id)] = carol.choices()
    assert chat_shape(chat_store, carol.owner, chat_id) == chat_shape(chat_store, chats.owner, session.chat_id)

    # A file of turns only (written before trees, or by a chat without versions) imports as it always did.
    older = tmp_path / "older.json"
    older.write_text(json.dumps({"system_prompt": "", "turns": saved["turns"]}))
    handlers.import_(imported, str(older))
    plain = chat_sidebar.keep_import(bob, imported, "")["session"]
    assert chat_shape(chat_store, bob.owner, plain.chat_id) == ([("user", "Name a berry.", None), ("assistant", saved["turns"][1]["content"], 0)], [0, 1])


def test_an_imported_version_keeps_its_media(chat_store, upload_folder, loaded_models):
    chats = user_chats(chat_store)
    red = picture(upload_folder / "a" / "red.png", "red")
    session = chats.add(MessageTree.line([Turn(role="user", content="Look", files=[str(red)]), Turn(role="assistant", content="Red.")]))
    session.tree.add(Turn(role="user", content="Look again", files=[str(picture(upload_folder / "b" / "blue.png", "blue"))]), None)
    chats.keep(session, session.chat_id, "", "")  # an edit: a new version of the first message
    handlers = ChatHandlers(loaded_models, CONTROLS)
    exported = handlers.export(session, "")["value"]
    assert Path(exported).read_text().count("data:image/png") == 2, "each message's medium once"

    os.remove(red)
    imported = ChatSession()
    handlers.import_(imported, exported)
    copy = chat_sidebar.keep_import(chats, imported, "")["session"]
    handlers.switch_version(copy, str(versions_of(copy, 0)[0]))
    assert [t.content for t in copy.turns] == ["Look", "Red."]
    assert Image.open(copy.turns[0].files[0]).getpixel((0, 0)) == (255, 0, 0)
