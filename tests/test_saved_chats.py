"""Saved chats and one reply at a time, as plain functions (no browser): one user's chats in the
store (SQLite here; tests/test_store.py runs the store on PostgreSQL too), their media checks,
the browser's id and secret, the chats older versions kept in the browser, and switching chats
while a reply streams, on the real default model."""

import asyncio
import json
import os
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from tests.page_input import CONTROLS, message, run, settings
from webui import chat_sidebar
from store import open_store
from webui.browser_storage import browser_memory, page_secret
from webui.chat_keeper import title_of
from webui.conversation import ChatSession, Turn, model_request, render
from webui.handlers import ChatHandlers
from webui.saved_chats import SavedChats


@pytest.fixture
def handlers(slot):
    return ChatHandlers(slot, CONTROLS)


@pytest.fixture
def chat_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}")
    yield store
    store.close()


def user_chats(store, owner="browser:" + "a" * 32):
    return SavedChats(store, owner, owner.removeprefix("browser:"))


def chat_session(chats, *texts):
    session = chats.new_session()
    session.turns = [Turn(role=("user", "assistant")[i % 2], content=text) for i, text in enumerate(texts)]
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
    a.turns += [Turn(role="user", content="More?"), Turn(role="assistant", content="Sure.")]
    chats.keep(a, a.chat_id, "Be brief.", "[]")
    chats.keep(b, b.chat_id, "", "")
    assert [chat_id for _, chat_id in chats.choices()] == [a.chat_id, b.chat_id]
    # The page's system prompt goes to the chat it was shown with, not to a newer session.
    chats.keep(b, a.chat_id, "Be kind.", "")
    assert (chats.find(a.chat_id).system, chats.find(b.chat_id).system) == ("Be kind.", "")

    assert chats.rename(a.chat_id, "  Fruit\n talk ") == "" and chats.find(a.chat_id).title == "Fruit talk"
    assert "needs a title" in chats.rename(a.chat_id, "  ") and chats.find(a.chat_id).title == "Fruit talk"
    assert "once it has a message" in chats.rename(new.chat_id, "Nothing yet")
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
    session.keeper.save(session.turns)
    assert [m.state for m in chat_store.messages(chats.owner, session.chat_id)] == ["done", "writing"]
    # Only what a chat needs is stored: nothing that exists only while a reply streams.
    assert [m.data for m in chat_store.messages(chats.owner, session.chat_id)] == [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    # A reply the store still has as writing (the server died mid-reply) opens as stopped.
    reopened = chats.open(session.chat_id, "")
    assert [(t.content, t.stopped) for t in reopened.turns] == [("Hi", False), ("Hello", True)]

    session.turns[1].writing = False
    session.turns[1].content = "Hello there"
    session.turns.append(Turn(role="user", content="Bye", error="No model is loaded."))
    session.keeper.save(session.turns)
    rows = chat_store.messages(chats.owner, session.chat_id)
    assert [(m.data["content"], m.state) for m in rows] == [("Hi", "done"), ("Hello there", "done"), ("Bye", "error")]
    assert [t.row for t in session.turns] == [m.id for m in rows]
    # A regenerated reply's row goes; the others stay the rows they were.
    del session.turns[1:]
    session.keeper.save(session.turns)
    assert [m.id for m in chat_store.messages(chats.owner, session.chat_id)] == [rows[0].id]


def test_two_tabs_of_one_chat_never_drop_each_others_messages(chat_store):
    chats = user_chats(chat_store)
    first = chat_session(chats, "Hi", "Hello")
    chats.keep(first, first.chat_id, "", "")
    second = chats.open(first.chat_id, "")
    first.turns += [Turn(role="user", content="From tab one")]
    second.turns += [Turn(role="user", content="From tab two")]
    first.keeper.save(first.turns)
    second.keeper.save(second.turns)
    other_tab = user_chats(chat_store)
    other_chat = chat_session(other_tab, "Another chat")
    other_tab.keep(other_chat, other_chat.chat_id, "", "")
    contents = [t.content for t in chats.open(first.chat_id, "").turns]
    assert contents == ["Hi", "Hello", "From tab one", "From tab two"]
    assert len(chats.choices()) == 2


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
    a = chats.add([turn])
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
    shown = render(session.turns)
    assert shown[0]["content"] == [{"path": copy}, "Look"]
    assert shown[1]["metadata"]["title"] == "📎 Missing files" and "gone.png, outside.png" in shown[1]["content"]
    request = model_request(session.turns)
    assert request.messages == [{"role": "user", "content": "<image>Look"}] and request.media == {"image": [copy]}
    # A message whose only file is gone still shows.
    b = chats.add([Turn(role="user", files=[str(gone)])])
    assert render(chats.open(b.chat_id, str(upload_folder)).turns)[0]["content"] == ["📎 gone.png"]

    # A long-open chat whose page copies Gradio deleted gets them back from the store, and keeps them kept.
    Path(copy).unlink()
    session.keeper.restore_media(session.turns)
    assert Path(session.turns[0].files[0]).read_bytes() == chat_store.media.file(medium).read_bytes()
    fresh = chats.new_session()
    fresh.turns = [Turn(role="user", content="New", files=[str(picture(upload_folder / "n" / "new.png", "green"))])]
    fresh.keeper.save(fresh.turns)
    Path(fresh.turns[0].files[0]).unlink()
    fresh.keeper.restore_media(fresh.turns)
    fresh.keeper.save(fresh.turns)
    assert Image.open(fresh.turns[0].files[0]).getpixel((0, 0)) == (0, 128, 0)
    assert isinstance(chat_store.messages(chats.owner, fresh.chat_id)[0].data["files"][0], dict), "still kept as a medium"
    chats.delete(fresh.chat_id)

    # The same picture in another chat (under another name) is kept once, and goes with the last chat using it.
    again = chats.add([Turn(role="user", content="Again", files=[str(picture(upload_folder / "x" / "same.png", "red"))])])
    assert list(chat_store.media_of(chats.owner)) == [medium]
    chats.delete(a.chat_id)
    assert chat_store.media.file(medium).exists()
    chats.delete(again.chat_id)
    assert not chat_store.media.file(medium).exists() and chat_store.media_of(chats.owner) == {}


def noise(path):
    """A picture of about 4.9 KB: noise does not compress."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.frombytes("RGB", (40, 40), os.urandom(4800)).save(path)
    return path


def test_a_user_over_the_media_quota_is_told_and_the_chat_is_kept(tmp_path, upload_folder):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", media_quota=6000, data=tmp_path)
    try:
        chats = user_chats(store)
        first, second = noise(upload_folder / "a" / "first.png"), noise(upload_folder / "b" / "second.png")
        chats.add([Turn(role="user", content="One", files=[str(first)])])
        with pytest.warns(UserWarning, match=r"second.png is not kept with the chat: your saved chats' media would take 9.\d KB, over "
                                             r"this server's limit of 5.9 KB per user \(--max-user-media-size\)"):
            two = chats.add([Turn(role="user", content="Two", files=[str(second)])])
        assert len(store.media_of(chats.owner)) == 1
        opened = chats.open(two.chat_id, str(upload_folder)).turns
        assert [t.content for t in opened] == ["Two"] and opened[0].files == [str(second)], "saved, its file named by its path"
        # Another user has a quota of their own.
        other = user_chats(store, "login:bob")
        other.add([Turn(role="user", content="Mine", files=[str(second)])])
        assert len(store.media_of("login:bob")) == 1
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


def sidebar_over(store, export_limit=100 * 2**20):
    """The sidebar's handlers over ``store``, without a page around them."""
    sidebar = chat_sidebar.ChatSidebar.__new__(chat_sidebar.ChatSidebar)
    sidebar.store, sidebar.export_limit, sidebar.setting_names = store, export_limit, CONTROLS
    return sidebar


def test_all_of_a_users_chats_export_as_conversation_files_that_import(chat_store, upload_folder, slot):
    chats = user_chats(chat_store)
    chats.add([Turn(role="user", content="Look", files=[str(picture(upload_folder / "a" / "red.png", "red"))]),
               Turn(role="assistant", content="Red.")], system="Be brief.")
    chats.add([Turn(role="user", content="Say: hi/there?"), Turn(role="assistant", content="hi")])
    noisy = noise(upload_folder / "n" / "noise.png")
    chats.add([Turn(role="user", content="Too big", files=[str(noisy)])])
    user_chats(chat_store, "login:bob").add([Turn(role="user", content="Bob's secret")])

    with pytest.warns(UserWarning, match="Left out of the export: Too big: With its media the conversation is over 5.9 KB"):
        exported = sidebar_over(chat_store, export_limit=6000).export_all(chats)
    with zipfile.ZipFile(exported["value"]) as archive:
        names = archive.namelist()
        assert names == ["002 Say_ hi_there_.json", "003 Look.json"], "numbered as listed, newest first"
        archive.extractall(upload_folder / "unzipped")
    handlers = ChatHandlers(slot, CONTROLS)
    session = ChatSession()
    assert handlers.import_(session, str(upload_folder / "unzipped" / names[1]))["system"] == "Be brief."
    assert [t.content for t in session.turns] == ["Look", "Red."]
    assert Image.open(session.turns[0].files[0]).getpixel((0, 0)) == (255, 0, 0)
    assert "Bob's secret" not in json.dumps([(upload_folder / "unzipped" / name).read_text() for name in names])


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
    assert [t.role for t in session.turns] == ["user", "assistant"] and session.answering
    handlers.stop(session)
    await task
    assert not session.answering and session.turns[-1].stopped
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
    assert task.done() and not second.answering, "the switch waits for the reply to stop"
    shown = view["session"]
    assert shown is not second and shown.chat_id == first.chat_id == view["shown"]
    assert [t.content for t in shown.turns][0] == "Say apple." and view["system"] == "Be brief." and view["chatbot"] == render(shown.turns)
    assert chats.find(second.chat_id).system == "Be long."
    kept = chats.open(second.chat_id, str(upload_folder)).turns
    assert kept[0].content == "Write a long story about a lighthouse."
    assert kept[1].stopped and kept[1].content == second.turns[1].content
    assert len(second.turns[1].content) < 2000, "the reply went on after the switch"


async def test_the_message_is_saved_when_sent_and_the_reply_as_it_streams(handlers, chat_store):
    chats = user_chats(chat_store)
    session = chats.new_session()
    task = await started_reply(handlers, session, "Write a long story about a dragon.")
    rows = chat_store.messages(chats.owner, session.chat_id)
    assert rows[0].data["content"] == "Write a long story about a dragon.", "the message is saved before its reply"
    assert chats.find(session.chat_id).title == "Write a long story about a dragon."
    deadline = asyncio.get_running_loop().time() + 30
    while len(rows) < 2 or len(rows[1].data["content"]) < 20:
        assert asyncio.get_running_loop().time() < deadline and not task.done(), "the reply was not saved while it streamed"
        await asyncio.sleep(0.2)
        rows = chat_store.messages(chats.owner, session.chat_id)
    assert rows[1].state == "writing" and session.turns[1].content.startswith(rows[1].data["content"])
    handlers.stop(session)
    await task
    [asked, reply] = chat_store.messages(chats.owner, session.chat_id)
    assert reply.state == "stopped" and reply.data["content"] == session.turns[1].content
    assert reply.data["stats"]["finish_reason"] == "stopped"
    await run(handlers.send(session, message("Write a poem about the sea."), **settings(2)))
    assert session.turns[-1].stats.finish_reason == "length"
    assert chat_store.messages(chats.owner, session.chat_id)[-1].state == "length"


async def test_continue_writes_on_the_cut_reply_in_the_same_message_and_keeps_it(handlers, chat_store, slot):
    chats = user_chats(chat_store)
    session = chats.new_session()
    asked = "Write a long story about a dragon."
    await run(handlers.send(session, message(asked), **settings(8)))
    first_part = session.turns[1].model_copy()
    assert first_part.stats.finish_reason == "length"

    updates = await run(handlers.continue_reply(session, **settings(8)))
    [whole] = slot.model.chat([{"role": "user", "content": asked}], temperature=0, max_new_tokens=16)
    assert [t.role for t in session.turns] == ["user", "assistant"]
    reply = session.turns[1]
    assert reply.content == whole.response_text, "the model went on from where the reply ended"
    shown = [update["chatbot"] for update in updates]
    assert all(chat[0]["role"] == "user" and chat[1]["content"].startswith(first_part.content.strip()) for chat in shown)
    assert len(shown) > 3 and all(len(chat) == 2 for chat in shown[1:-1]), "the reply grew in place, without stats until it ended"
    assert (reply.stats.tokens, reply.stats.finish_reason) == (16, "length")
    assert reply.stats.first_token_seconds == first_part.stats.first_token_seconds
    assert shown[-1][-1]["content"] == f'<span class="reply-stats">{reply.stats.line()}</span>'
    [_, row] = chat_store.messages(chats.owner, session.chat_id)
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
    session.turns.append(Turn(role="user", content="And then?"))
    with pytest.warns(UserWarning, match="There is no reply to continue"):
        refused = await run(handlers.continue_reply(session, **settings()))
    assert refused == [{"chatbot": render(session.turns)}] and len(session.turns) == 3
