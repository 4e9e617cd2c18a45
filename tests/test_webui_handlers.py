"""The page's handlers as plain functions, on the real default model, without a browser."""

import asyncio
import base64
import gc
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import jsonschema
import psutil
import pytest
from huggingface_hub import constants
from PIL import Image

from chat.reply_stats import ReplyStats
from chat.session import ChatSession
from chat.streaming import throttled
from chat.turns import SavedToolCall, SummaryNote, Turn, model_request
from engines import ConfigError, LoadedModels
from engines.model_files.backend_registry import BACKENDS
from harness.reply_schemas import SCHEMAS
from limits import Limits
from store import MessageTree
from tests.held_load import load_held
from tests.hub_cache import cache_model
from tests.page_input import CONTROLS, message, run, settings, written_imports
from webui import replying
from webui.chat_view import render, turn_of_message
from webui.handlers import ChatHandlers, backend_options, message_box_for
from webui.model_rights import ModelRights
from webui.user_turns import page_user


@pytest.fixture(scope="module")
def loaded_models():
    loaded_models = LoadedModels()
    loaded_models.load({"infer_backend": "huggingface", "infer_dtype": "bfloat16"})
    yield loaded_models
    loaded_models.unload()


@pytest.fixture
def handlers(loaded_models):
    return ChatHandlers(loaded_models, CONTROLS)


def shown_text(chat_message):
    content = chat_message["content"]
    return content if isinstance(content, str) else "".join(part for part in content if isinstance(part, str))


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "red.png"
    Image.new("RGB", (32, 32), "red").save(path)
    return str(path)


async def test_send_streams_the_same_reply_as_the_engine(handlers, loaded_models):
    session = ChatSession()
    started = time.perf_counter()
    updates = await run(handlers.send(session, message("Name three colors."), **settings(24)))
    elapsed = time.perf_counter() - started
    chats = [update["chatbot"] for update in updates]
    assert len(chats) >= 3, "the reply should arrive in several updates"
    assert chats[0][-1] == {"role": "user", "content": ["Name three colors."]}
    expected = loaded_models.model.chat([{"role": "user", "content": "Name three colors."}], temperature=0, max_new_tokens=24)[0]
    assert [t.role for t in session.turns] == ["user", "assistant"]
    assert session.turns[1].content == expected.response_text
    assert shown_text(chats[-1][-2]) == expected.response_text.strip()
    # Under the finished reply: how it was written.
    stats = session.turns[1].stats
    assert (stats.tokens, stats.finish_reason, stats.backend) == (expected.response_length, expected.finish_reason, "huggingface")
    assert 0 < stats.first_token_seconds < elapsed and 0 < (stats.tokens - 1) / stats.tokens_per_second < elapsed
    assert chats[-1][-1] == {"role": "assistant", "content": f'<span class="reply-stats">{stats.line()}</span>'}
    assert all("reply-stats" not in shown_text(chat[-1]) for chat in chats[:-1]), "stats shown before the reply was finished"
    # The sent message leaves the box at once; the box stays editable, and later updates leave
    # alone what is typed there meanwhile.
    assert updates[0]["message_box"] == {"__type__": "update", "value": {"text": "", "files": []}, "interactive": True}
    assert all("message_box" not in update for update in updates[1:])


async def test_media_a_text_model_cannot_read_is_refused_clearly_and_nothing_is_lost(handlers, image_file):
    session = ChatSession(tree=MessageTree.line([Turn(role="user", content="Hi"), Turn(role="assistant", content="Hello!")]))
    updates = await run(handlers.send(session, message("What is this?", [image_file]), **settings()))
    final = updates[-1]["chatbot"]
    asked = session.turns[2]
    assert asked.files == [image_file] and "does not accept images" in asked.error
    assert final[2]["content"] == [{"path": image_file}, "What is this?"]
    assert "does not accept images" in final[3]["content"]
    assert final[3]["metadata"]["title"].startswith("⚠")
    # The refused turn stays visible but is not sent again: the next message is answered.
    await run(handlers.send(session, message("Say yes."), **settings(4)))
    assert [t.role for t in session.turns] == ["user", "assistant", "user", "user", "assistant"]
    assert session.turns[-1].content
    # What the model was asked for that reply: the refused turn and its image left out.
    request = model_request(session.turns[:-1])
    assert [m["content"] for m in request.messages] == ["Hi", "Hello!", "Say yes."] and request.media == {}


async def test_a_reply_with_logprobs_asked_for_is_written_as_without(handlers, loaded_models):
    """Logprobs in the model's stream (a Python caller's default) leave the page's reply as it is."""
    plain, with_logprobs = ChatSession(), ChatSession()
    await run(handlers.send(plain, message("Name a fruit."), **settings(12)))
    await run(handlers.send(with_logprobs, message("Name a fruit."), **settings(12), logprobs=2))
    assert with_logprobs.turns[1].content == plain.turns[1].content != ""
    assert with_logprobs.turns[1].stats.tokens == plain.turns[1].stats.tokens


async def test_invalid_tools_json_gets_a_clear_message(handlers):
    session = ChatSession()
    await run(handlers.send(session, message("Weather?"), **settings(tools='[{"type": "function",')))
    assert len(session.turns) == 1
    assert session.turns[0].error.startswith("Tools are not valid JSON")


async def test_a_reply_format_holds_the_reply_to_its_schema(handlers):
    schema = SCHEMAS["person"]
    session = ChatSession()
    await run(handlers.send(session, message("Describe a person."), **settings(160, reply_format="json_schema", reply_schema=json.dumps(schema))))
    jsonschema.validate(json.loads(session.turns[-1].content), schema)
    await run(handlers.send(session, message("Now the capital of France."), **settings(160, reply_format="json_object")))
    assert isinstance(json.loads(session.turns[-1].content), dict)


@pytest.mark.parametrize(("reply_schema", "shown"), [
    ("", "the JSON schema is empty"),
    ('{"type": "object",', "The JSON schema is not valid JSON"),
    ('{"type": "array", "uniqueItems": true}', "uses the keyword 'uniqueItems'"),
    (json.dumps({"type": "string", "maxLength": 10**6}), "maxLength is 1,000,000"),
])
async def test_a_bad_reply_schema_is_shown_and_the_conversation_kept(handlers, reply_schema, shown):
    session = ChatSession()
    await run(handlers.send(session, message("Say hi."), **settings(8)))
    before = [(turn.role, turn.content) for turn in session.turns]
    await run(handlers.send(session, message("Describe a person."), **settings(reply_format="json_schema", reply_schema=reply_schema)))
    assert [(turn.role, turn.content) for turn in session.turns[:2]] == before
    assert session.turns[-1].role == "user" and shown in session.turns[-1].error


async def test_stop_keeps_the_partial_reply_and_frees_the_engine(handlers, loaded_models):
    session = ChatSession()
    updates = handlers.send(session, message("Write a long story about a dragon."), **settings(400))
    seen = 0
    async for update in updates:
        if session.turns[-1].role == "assistant" and session.turns[-1].content:
            seen += 1
            if seen == 2:
                handlers.stop(session)
    reply = session.turns[-1]
    assert reply.stopped and reply.content
    assert len(loaded_models.model.engine.tokenizer(reply.content).input_ids) < 100
    assert (reply.stats.finish_reason, reply.stats.tokens) == ("stopped", loaded_models.model.count_tokens(reply.content))
    assert f"■ stopped after {reply.stats.tokens} tokens · " in update["chatbot"][-1]["content"]
    # The engine's generation slot is released only once the model thread really stopped.
    assert loaded_models.model.line.running == 0


async def test_closing_the_throttled_stream_cancels_the_model_stream():
    produced, closed = [], asyncio.Event()

    async def endless():
        try:
            while True:
                produced.append("x")
                yield "x"
                await asyncio.sleep(0.001)
        finally:
            closed.set()

    stream = throttled(endless(), lambda: False, interval=0.02)
    first = await anext(stream)
    await stream.aclose()
    assert first == ["x"] and closed.is_set()
    count = len(produced)
    await asyncio.sleep(0.05)
    assert len(produced) == count


async def test_throttled_updates_gather_pieces():
    async def fast():
        for _ in range(200):
            yield "a"
            await asyncio.sleep(0.001)

    chunks = [chunk async for chunk in throttled(fast(), lambda: False, interval=0.04)]
    assert "".join(piece for chunk in chunks for piece in chunk) == "a" * 200
    assert chunks[0] == ["a"], "the first piece goes out at once"
    assert len(chunks) < 50, f"{len(chunks)} updates for 200 pieces: not throttled"


async def test_the_reply_clock_times_the_model_not_the_page():
    """Each item reaches the clock as the model writes it, however long the page holds each update."""
    arrivals, written = [], []

    async def steady():
        for index in range(20):
            written.append(time.monotonic())
            yield index
            await asyncio.sleep(0.01)

    async for _ in throttled(steady(), lambda: False, interval=0.01, arrived=lambda item: arrivals.append((item, time.monotonic()))):
        await asyncio.sleep(0.3)  # a page slow to draw: far fewer updates than items
    assert [item for item, _ in arrivals] == list(range(20))
    assert all(at - made < 0.1 for (_, at), made in zip(arrivals, written)), "an item was timed when the page took it"


async def test_updates_are_spaced_out_when_the_page_is_slow_to_handle_them():
    """Where each update takes the page a while (a long conversation re-processed every time),
    updates come further apart, so the page's work stays a small share of the machine's time."""
    from chat.streaming import PAGE_SHARE

    async def steady():
        for _ in range(150):
            yield "a"
            await asyncio.sleep(0.004)

    received, handled_for, waited = [], [], []
    resumed = None
    async for chunk in throttled(steady(), lambda: False, interval=0.01):
        now = time.monotonic()
        if resumed is not None:
            waited.append(now - resumed)
        received += chunk
        work = 0.03 + 0.01 * len(handled_for)
        time.sleep(work)  # the page's own work, holding the event loop as Gradio's does
        handled_for.append(work)
        resumed = time.monotonic()
    assert received == ["a"] * 150
    # Every gap after an update took the page w is at least w / PAGE_SHARE (the interval alone is 10 ms).
    for work, gap in list(zip(handled_for, waited))[:-1]:
        assert gap >= 0.9 * work / PAGE_SHARE, (work, gap)


async def test_a_long_conversation_gets_its_reply_in_fewer_updates(handlers):
    """The browser redraws every message of the Chatbot at each update, so under a long
    conversation updates come further apart: the browser's work stays a small share of the machine."""
    from chat.streaming import UPDATE_INTERVAL
    from webui.reply_view import update_interval

    session = ChatSession()
    for index in range(200):
        session.add(Turn(role=("user", "assistant")[index % 2], content=f"Note {index}."))
    interval = update_interval(len(render(session.tree)) + 1)  # the history and the message sent
    assert interval >= 2.5 * UPDATE_INTERVAL
    arrived = []
    async for _ in handlers.send(session, message("Count from one to fifty in words."), **settings(24)):
        arrived.append(time.monotonic())
    assert session.turns[-1].stats.tokens == 24
    # The first update shows the message, the last the stats line, the one before it the reply's
    # end as soon as it came; those between carry the reply as it is written.
    gaps = [later - earlier for earlier, later in zip(arrived[1:-2], arrived[2:-2])]
    assert len(gaps) >= 2 and min(gaps) >= 0.9 * interval, (interval, gaps)


async def test_regenerate_undo_clear_and_edit(handlers):
    session = ChatSession()
    await run(handlers.send(session, message("Count to five."), **settings(12)))
    first = session.turns[1].content
    await run(handlers.regenerate(session, **settings(12)))
    assert [t.role for t in session.turns] == ["user", "assistant"] and session.turns[1].content == first
    await run(handlers.send(session, message("Now count to three."), **settings(6)))

    edit = SimpleNamespace(index=0, value=[{"type": "text", "text": "Count to two."}], previous_value=["Count to five."])
    await run(handlers.edit(session, edit, **settings(6)))
    assert [t.content for t in session.turns][0] == "Count to two." and len(session.turns) == 2

    undone = handlers.undo(session)
    assert undone["chatbot"] == [] and session.turns == []
    assert undone["message_box"]["value"] == {"text": "Count to two.", "files": []}
    session.add(Turn(role="user", content="x"))
    assert handlers.clear(session)["chatbot"] == [] and session.turns == []


async def test_a_reply_and_a_summary_are_edited_into_new_versions_with_the_chat_after_them_kept(handlers, monkeypatch):
    """A reply's text, or a summary of earlier messages, edited in the Chatbot becomes a new
    version of it (the one edited one arrow away), the conversation after it kept, and the model
    reads the edit from the next message on; what is not the text (a stats line) is not edited."""
    session = ChatSession()
    note = SummaryNote(policy="compact", replaced=4, tokens_before=1900, tokens_after=900)
    for turn in [Turn(role="user", content="Hi, I am Ada."), Turn(role="assistant", content="Ada said hello.", summary=note),
                 Turn(role="user", content="Where do I live?"),
                 Turn(role="assistant", content="In Paris.", stats=ReplyStats(tokens=3, tokens_per_second=6.0, first_token_seconds=0.1, backend="huggingface",
                                                                       finish_reason="stop"))]:
        session.add(turn)

    def edit(shown_text: str, edited: str) -> SimpleNamespace:
        shown = render(session.tree)
        [index] = [i for i, message in enumerate(shown) if shown_text in message["content"]]
        return SimpleNamespace(index=index, previous_value=shown[index]["content"],
                               value=shown[index]["content"].replace(shown_text, edited))

    await run(handlers.edit(session, edit("Ada said hello.", "Ada lives in Lyon."), **settings(6)))
    await run(handlers.edit(session, edit("In Paris.", "In Lyon, as you said."), **settings(6)))
    turns = session.turns
    assert [turn.content for turn in turns] == ["Hi, I am Ada.", "Ada lives in Lyon.", "Where do I live?", "In Lyon, as you said."]
    assert turns[1].summary == note and turns[3].stats is None
    places = session.tree.branch()
    assert [session.tree.messages[place].content for place in session.tree.versions(places[1])] == ["Ada said hello.", "Ada lives in Lyon."]
    assert len(session.tree.versions(places[3])) == 2
    sent = model_request(turns + [Turn(role="user", content="And my name?")]).messages
    assert "Ada lives in Lyon." in sent[1]["content"] and sent[3]["content"] == "In Lyon, as you said."

    warned = []
    monkeypatch.setattr(gr, "Warning", warned.append)
    session.tree.messages[places[3]].stats = ReplyStats(tokens=3, tokens_per_second=6.0, first_token_seconds=0.1, backend="huggingface",
                                                        finish_reason="stop")
    await run(handlers.edit(session, edit("tokens/s", "fast"), **settings(6)))
    assert session.turns == turns and len(session.tree.versions(places[3])) == 2
    assert warned and warned[0].startswith("Only the text of a reply")


def test_stop_is_hidden_after_a_reply_event_and_never_shown_by_one():
    """The update after each reply event: Stop hidden once no reply is written; while one is, no
    change (a "shown" worked out then could land after the reply's own end: Stop shown for good)."""
    session = ChatSession()
    assert replying.stop_button(session) == gr.update(visible=False)
    session.reply.begin()
    assert replying.stop_button(session) == gr.skip()


def test_the_follow_ups_of_a_reply_are_never_dropped_by_the_page(tmp_path):
    """Each reply event's follow-ups (Stop hidden, the documents' note counted again) run after the
    reply whatever is pending: at Gradio's default ("once") the page drops a follow-up triggered
    while the same one is pending, as the edit of a document's chip left its own pending when the
    text's reply ended, and Stop stayed shown for good (the third loaded run of a1153f1)."""
    from store.database import open_store
    from webui.layout import build_demo

    demo = build_demo(LoadedModels(), store=open_store(data=tmp_path))
    follow_ups = [block for block in demo.fns.values() if getattr(block.fn, "__name__", "") in ("stop_button", "attachments_note")]
    stop_buttons = [block for block in follow_ups if block.fn is replying.stop_button]
    assert len(stop_buttons) == 4, "one after each way to ask for a reply: send, regenerate, continue, edit"
    assert {block.trigger_mode for block in follow_ups} == {"always_last"}


def test_thinking_and_tool_calls_show_as_collapsible_messages():
    reply = Turn(role="assistant", reasoning="Let me check.", content="Checking now.",
                 tool_calls=[SavedToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}')])
    shown = render(MessageTree.line([reply]))
    assert shown[0] == {"role": "assistant", "content": "Let me check.", "metadata": {"title": "Thinking", "status": "done"}}
    assert shown[1] == {"role": "assistant", "content": "Checking now."}
    assert shown[2]["metadata"]["title"] == "⚙ Tool call: get_weather" and '"city": "Oslo"' in shown[2]["content"]
    # While the reply is still being written: thinking is pending, a tool call being written shows as it comes.
    assert render(MessageTree.line([Turn(role="assistant", reasoning="hm", writing=True)]))[0]["metadata"]["status"] == "pending"
    writing = render(MessageTree.line([Turn(role="assistant", content="Sure.", tool_text='<tool_call>{"name": "get_', writing=True)]))
    assert writing[1]["metadata"] == {"title": "⚙ Tool call", "status": "pending"}
    # Edits of a message map back to the turn that shows it.
    turns = [Turn(role="user", content="q"), reply, Turn(role="user", content="again")]
    assert turn_of_message(MessageTree.line(turns), 4) == 2
    # The model gets the answer and the calls back, not the reasoning.
    assert model_request(turns).messages[1] == {"role": "assistant", "content": "Checking now.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}


async def test_a_tool_call_streams_into_a_tool_call_block(handlers):
    tools = '[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'
    session = ChatSession(tree=MessageTree.line([
        Turn(role="user", content="What is the weather in Paris?"),
        Turn(role="assistant", tool_calls=[SavedToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}')]),
        Turn(role="user", content="And in Oslo?"),
    ]))
    updates = await run(handlers.regenerate(session, **settings(max_new_tokens=40, tools=tools)))
    reply = session.turns[-1]
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("get_weather", {"city": "Oslo"})], reply
    *_, call, stats = updates[-1]["chatbot"]
    assert call["metadata"]["title"] == "⚙ Tool call: get_weather" and "reply-stats" in stats["content"]


def test_media_placeholders_stay_with_their_message(image_file):
    turns = [Turn(role="user", content="first"), Turn(role="assistant", content="ok"), Turn(role="user", content="look", files=[image_file])]
    request = model_request(turns)
    assert request.messages[2] == {"role": "user", "content": "<image>look"} and request.media == {"image": [image_file]}


@pytest.mark.parametrize(("name", "kind"), [("a.PNG", "image"), ("b.heic", "image"), ("c.avif", "image"), ("d.m4v", "video"),
                                          ("e.opus", "audio"), ("f.aiff", "audio"), ("g.aac", "audio"), ("h.pdf", None)])
def test_the_page_sorts_a_file_into_the_kind_the_engine_reads_it_as(name, kind, monkeypatch):
    """One list of media extensions serves the engine and the page: the page once left .heic,
    .avif, .opus, .aac and .aiff to the platform's MIME table, which a machine may lack (as here)."""
    import mimetypes

    from engines.prompt.media import MEDIA_EXTENSIONS
    from chat.turns import media_kind

    monkeypatch.setattr(mimetypes, "guess_type", lambda path, strict=True: (None, None))
    assert media_kind(name) == kind
    assert kind is None or name.lower().endswith(MEDIA_EXTENSIONS[kind])


def test_export_embeds_the_media_and_import_writes_them_to_the_upload_folder(handlers, image_file, upload_folder):
    picture = open(image_file, "rb").read()
    session = ChatSession(tree=MessageTree.line([Turn(role="user", content="Hi", files=[image_file]), Turn(role="assistant", content="Hello")]))
    exported = handlers.export(session, "Be brief.")["value"]
    assert exported.startswith(str(upload_folder)), "among the page's files, which are kept for a while only"
    text = open(exported).read()
    assert image_file not in text, "the export names a path on this server"
    [medium] = json.loads(text)["turns"][0]["files"]
    assert medium["name"] == "red.png" and medium["data"].startswith("data:image/png;base64,")

    os.remove(image_file)  # as on another machine: the original file is not there
    restored = ChatSession()
    shown = handlers.import_(restored, exported)
    [imported] = restored.turns[0].files
    assert imported.startswith(str(upload_folder)) and os.path.basename(imported) == "red.png"
    assert open(imported, "rb").read() == picture
    assert [t.model_dump(exclude={"files"}) for t in restored.turns] == [t.model_dump(exclude={"files"}) for t in session.turns]
    assert shown == {"chatbot": render(restored.tree), "system": "Be brief."}
    # Importing again writes a fresh folder: the first import's files stay as they were.
    handlers.import_(ChatSession(), exported)
    assert len(written_imports(upload_folder)) == 2 and os.path.exists(imported)


async def test_a_conversation_exports_as_markdown_with_roles_reasoning_tool_calls_and_media(handlers, image_file, upload_folder, tmp_path):
    session = ChatSession()
    await run(handlers.send(session, message("Say hi."), **settings(4)))  # a real reply, with its stats line
    session.turns[0].files = [image_file]  # as a multimodal model's chat has them
    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"RIFF" + bytes(2044))
    session.add(Turn(role="user", content="Weather?", files=[str(clip)], missing_files=["gone.mp4"]))
    session.add(Turn(role="assistant", reasoning="They want the weather.", content="Checking.",
                     tool_calls=[SavedToolCall(id="c1", name="get_weather", arguments='{"city": "Paris ```"}')]))
    exported = handlers.export_markdown(session, "Be brief.")["value"]
    assert exported.startswith(str(upload_folder)) and exported.endswith(".md")
    text = open(exported, encoding="utf-8").read()
    assert text.startswith("# Conversation\n\n## System prompt\n\nBe brief.\n\n## User\n\n![red.png](data:image/png;base64,")
    assert [line for line in text.splitlines() if line.startswith("## ")] == ["## System prompt", "## User", "## Assistant", "## User", "## Assistant"]
    picture = text.split("(data:image/png;base64,", 1)[1].split(")", 1)[0]
    assert base64.b64decode(picture) == open(image_file, "rb").read()
    reply = session.turns[1]
    assert f"\n{reply.content}\n\n*{reply.stats.line()}*\n" in text and reply.stats.tokens == 4
    assert "<details><summary>Thinking</summary>\n\nThey want the weather.\n\n</details>" in text
    assert '**Tool call** `get_weather`:\n\n````json\n{"city": "Paris ```"}\n````' in text, "a fence the arguments cannot close"
    assert "📎 audio: clip.wav (2 KB, not embedded)" in text and "📎 gone.mp4 (missing on the server)" in text
    assert str(tmp_path) not in text, "no path on this server"
    os.remove(image_file)
    with pytest.raises(gr.Error, match="red.png, attached to this conversation, is no longer on the server"):
        handlers.export_markdown(session, "")


def test_an_export_larger_than_an_import_takes_is_refused_and_leaves_nothing(loaded_models, image_file, upload_folder):
    session = ChatSession(tree=MessageTree.line([Turn(role="user", content="Hi", files=[image_file] * 50)]))
    with pytest.raises(gr.Error, match=r"over 2 KB, the largest conversation file this server imports \(--max-upload-size\)"):
        ChatHandlers(loaded_models, CONTROLS, limits=Limits(max_upload_size=2048)).export(session, "")
    assert not list(upload_folder.glob("anychat-export-*"))


async def test_a_file_gone_since_it_was_sent_shows_as_missing_and_the_chat_goes_on(handlers, image_file):
    session = ChatSession(tree=MessageTree.line([Turn(role="user", content="Look.", files=[image_file]), Turn(role="assistant", content="Red.")]))
    os.remove(image_file)  # the page's files are deleted after their lifetime
    chat = (await run(handlers.send(session, message("And now?"), **settings(4))))[-1]["chatbot"]
    assert "red.png: no longer on the server, so neither shown nor sent to the model" in json.dumps(chat)
    assert session.turns[0].files == [] and session.turns[-1].role == "assistant" and session.turns[-1].content


def conversation_file(tmp_path, files, name="conversation.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"system_prompt": "", "turns": [{"role": "user", "content": "look", "files": files}]}))
    return str(path)


def refused_import(handlers, path, match):
    """Importing ``path`` is refused with ``match``, and the conversation there stays as it was."""
    session = ChatSession(tree=MessageTree.line([Turn(role="user", content="Keep me")]))
    with pytest.raises(gr.Error, match=match):
        handlers.import_(session, path)
    assert [t.content for t in session.turns] == ["Keep me"]


def test_import_reads_no_path_on_the_server(handlers, image_file, tmp_path, upload_folder):
    # An export from before media were embedded: it names files on the server that wrote it.
    refused_import(handlers, conversation_file(tmp_path, [image_file]), "exported by an older version of anychat.*red.png.*cannot be imported")
    for where in (image_file, f"file://{image_file}", "/etc/passwd", "https://example.com/a.png", "data:text/plain;base64,aGk="):
        refused_import(handlers, conversation_file(tmp_path, [{"name": "a.png", "data": where}]), "'a.png' is not embedded in the file.*never read")
    assert written_imports(upload_folder) == []
    # Text-only files of that older version still import.
    handlers.import_(ChatSession(), conversation_file(tmp_path, []))

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"turns": [{"role": "robot", "content": "x"}]}))
    refused_import(handlers, str(bad), "not an anychat conversation file: turns.0.role")
    bad.write_bytes(b"\xff\xfe not text")
    refused_import(handlers, str(bad), "not an anychat conversation file: it is not JSON text")


def tree_file(tmp_path, turns, tree):
    """A conversation file of ``turns`` (contents, alternately user and assistant) and ``tree``."""
    path = tmp_path / "tree.json"
    roles = ("user", "assistant")
    path.write_text(json.dumps({"turns": [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns)], "tree": tree}))
    return str(path)


def other(parent, content):
    return {"parent": parent, "message": {"role": "assistant", "content": content}}


@pytest.mark.parametrize("tree, refusal", [
    ([{"turn": 0}, {"parent": 5, "turn": 1}], r"tree.1 follows tree.5, which is not in the tree"),
    ([{"turn": 0}, {"parent": 1, "turn": 1}], r"tree.1 follows itself \(a loop\)"),
    ([{"turn": 0}, other(2, "b"), {"parent": 1, "turn": 1}], r"tree.1 follows tree.2, which comes after it.*out of order, or loops"),
    ([{"turn": 0}, {"parent": 0, "turn": 3}], r"tree.1 is turns.3, which is not in the file"),
    ([{"turn": 0}, {"parent": 0, "turn": 0}], r"turns.0 is in the tree twice \(tree.0 and tree.1\)"),
    ([{"turn": 0}, other(0, "b")], r"turns.1 is not in the tree"),
    ([{"turn": 0}, other(0, "b"), {"parent": 1, "turn": 1}], r"the turns are not a branch of the tree: turns.1 does not follow turns.0"),
    ([{"parent": None}], r"tree.0: Value error, a message of the tree has either a turn"),
    ([{"parent": -1, "turn": 0}], r"tree.0.parent: Input should be greater than or equal to 0"),
    # Another version's media are read as the turns' are: never from a path on the server.
    ([{"turn": 0}, {"parent": 0, "message": {"role": "assistant", "files": [{"name": "p.png", "data": "/etc/passwd"}]}}, {"parent": 0, "turn": 1}],
     r"'p.png' is not embedded in the file.*never read"),
])
def test_a_broken_message_tree_is_refused_and_names_its_fault(handlers, tmp_path, upload_folder, tree, refusal):
    refused_import(handlers, tree_file(tmp_path, ["q", "a"], tree), refusal)
    assert written_imports(upload_folder) == []


def test_a_files_tree_comes_with_its_turns_among_its_messages(handlers, tmp_path, upload_folder):
    session = ChatSession()
    handlers.import_(session, tree_file(tmp_path, ["q", "a2"], [{"turn": 0}, other(0, "a1"), {"parent": 0, "turn": 1}]))
    assert [t.content for t in session.turns] == ["q", "a2"]
    assert [(parent, turn.content) for parent, turn in zip(session.tree.parents, session.tree.messages)] == [
        (None, "q"), (0, "a1"), (0, "a2")]
    assert session.tree.branch() == [0, 2], "the branch shown is the file's turns"
    handlers.import_(session, tree_file(tmp_path, ["q", "a"], []))
    assert session.tree.parents == [None, 0] and [t.content for t in session.turns] == ["q", "a"], "a file of turns only: one branch"


def test_an_embedded_name_cannot_leave_the_import_folder(handlers, image_file, tmp_path, upload_folder):
    pixel = base64.b64encode(open(image_file, "rb").read()).decode()
    path = conversation_file(tmp_path, [{"name": "../../../evil", "data": f"data:image/png;base64,{pixel}"}])
    session = ChatSession()
    handlers.import_(session, path)
    [written] = written_imports(upload_folder)
    assert session.turns[0].files == [str(written)] and written.name == "evil.png"


def test_import_size_limits(loaded_models, tmp_path, upload_folder):
    data = base64.b64encode(b"\0" * 3000).decode()
    path = conversation_file(tmp_path, [{"name": "big.wav", "data": f"data:audio/wav;base64,{data}"}])
    small_files = ChatHandlers(loaded_models, CONTROLS, limits=Limits(max_upload_size=2048))
    refused_import(small_files, path, r"The file is [\d.]+ KB, over this server's limit of 2 KB .*\(--max-upload-size\)")
    small_media = ChatHandlers(loaded_models, CONTROLS, limits=Limits(max_import_media_size=2048))
    refused_import(small_media, path, r"'big.wav' is about 2.9 KB, over this server's limit of 2 KB for each medium .*\(--max-import-media-size\)")
    assert written_imports(upload_folder) == []
    ChatHandlers(loaded_models, CONTROLS, limits=Limits(max_import_media_size=4096)).import_(ChatSession(), path)
    assert [p.stat().st_size for p in written_imports(upload_folder)] == [3000]


async def test_two_sessions_at_once_stay_separate(handlers):
    one, two = ChatSession(), ChatSession()
    await asyncio.gather(
        run(handlers.send(one, message("Say apple."), **settings(6))),
        run(handlers.send(two, message("Say banana."), **settings(6))),
    )
    assert [t.content for t in one.turns][0] == "Say apple." and len(one.turns) == 2
    assert [t.content for t in two.turns][0] == "Say banana." and len(two.turns) == 2


def rss_mib():
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


async def test_load_unload_and_a_missing_backend(handlers, loaded_models):
    session = ChatSession()
    await run(handlers.send(session, message("Hi"), **settings(4)))
    loaded_rss = rss_mib()
    status = handlers.unload()["status"]
    unloaded_rss = rss_mib()
    assert status.startswith("No model loaded.")
    print(f"RSS loaded {loaded_rss:.0f} MiB, unloaded {unloaded_rss:.0f} MiB")
    assert loaded_rss - unloaded_rss > 150, f"unloading freed only {loaded_rss - unloaded_rss:.0f} MiB"

    await run(handlers.send(session, message("Still there?"), **settings(4)))
    assert "No model is loaded" in session.turns[-1].error

    shown = handlers.load("huggingface", "", "bfloat16", max_concurrent=2, progress=lambda *a, **k: None)
    assert shown["status"].startswith("✓ Loaded SmolLM2-135M-Instruct (embedded) on huggingface in ")
    assert shown["max_new_tokens"] == loaded_models.model.generation_defaults.max_new_tokens and set(CONTROLS) < set(shown)
    assert loaded_models.model.engine.model_args.max_concurrent == 2
    assert shown["message_box"]["sources"] == ["upload"] and "reads text only" in shown["message_box"]["placeholder"]
    engine = loaded_models.model.engine

    status = handlers.load("huggingface", "", "bfloat16", kv_cache_space_gb=2, progress=lambda *a, **k: None)["status"]
    assert "the huggingface backend does not use kv_cache_space_gb (kv_cache_space_gb is taken by vllm)" in status
    status = handlers.load("vllm", "", "auto", engine_args='{"max_num_seqs": 8', progress=lambda *a, **k: None)["status"]
    assert "Engine arguments are not valid JSON" in status
    assert "Loaded SmolLM2-135M-Instruct (embedded) on huggingface" in status and loaded_models.model.engine is engine

    status = handlers.load("sglang", "", "auto", progress=lambda *a, **k: None)["status"]
    assert "The sglang backend needs sglang" in status and BACKENDS["sglang"].install in status
    assert "Loaded SmolLM2-135M-Instruct (embedded) on huggingface" in status
    await run(handlers.regenerate(session, **settings(4)))
    assert [t.role for t in session.turns] == ["user", "assistant", "user", "assistant"]
    assert session.turns[-1].content and session.turns[0].content == "Hi"


def no_progress(*args, **kwargs):
    pass


def test_only_admins_manage_the_model(loaded_models):
    engine = loaded_models.model.engine
    rights = ModelRights(admins=frozenset({"alice"}))
    handlers = ChatHandlers(loaded_models, CONTROLS, rights)
    bob, alice = gr.Request(username="bob"), gr.Request(username="alice")
    for refused in (lambda: handlers.load("huggingface", "", "bfloat16", page_request=bob, progress=no_progress),
                    lambda: handlers.unload(page_request=bob),
                    lambda: handlers.unload()):  # no user at all, on a page with logins
        with pytest.raises(gr.Error, match="may not load or unload models. Model management needs an admin"):
            refused()
    assert loaded_models.model.engine is engine, "a refused user changed the model"
    assert "Model management needs an admin" in rights.note(bob) and "**bob**" in rights.note(bob)
    assert rights.note(alice) == "" and ModelRights().note(gr.Request()) == "", "without logins, the one user is the admin"

    status = handlers.load("huggingface", "", "bfloat16", page_request=alice, progress=no_progress)["status"]
    assert status.startswith("✓ Loaded SmolLM2-135M-Instruct (embedded) on huggingface") and loaded_models.model.engine is not engine


def test_trust_remote_code_comes_only_from_the_command_line(loaded_models):
    handlers = ChatHandlers(loaded_models, CONTROLS, ModelRights(trust_remote_code=False))
    engine = loaded_models.model.engine
    for backend in ("huggingface", "vllm", "sglang", "llamacpp"):
        for engine_args in ('{"trust_remote_code": true}', '{"trust-remote-code": true}'):
            status = handlers.load(backend, "", "auto", engine_args=engine_args, progress=no_progress)["status"]
            assert "engine_args must not hold trust_remote_code" in status and "start app.py with --trust-remote-code" in status, status
    status = handlers.load("huggingface", "", "auto", trust_remote_code=True, progress=no_progress)["status"]
    assert "trust_remote_code cannot be asked for from the page" in status and "--trust-remote-code" in status
    assert loaded_models.model.engine is engine and not engine.model_args.trust_remote_code
    # The server's own choice reaches every load from the page.
    ChatHandlers(loaded_models, CONTROLS, ModelRights(trust_remote_code=True)).load("huggingface", "", "bfloat16", progress=no_progress)
    assert loaded_models.model.engine.model_args.trust_remote_code


def test_backend_options_pass_only_what_was_filled_in():
    # Gradio's number fields show and send 0 when empty: 0 means the backend's default.
    empty = {"max_concurrent": 0, "max_model_len": 0, "kv_cache_space_gb": 0, "gpu_memory_utilization": 0,
             "tensor_parallel_size": 0, "enforce_eager": "auto", "lora_adapters": " ", "engine_args": ""}
    assert backend_options() == backend_options(**empty) == {}
    filled = {"max_concurrent": 2, "max_model_len": 4096.0, "kv_cache_space_gb": 1.5, "gpu_memory_utilization": 0.8,
              "tensor_parallel_size": 2, "enforce_eager": "eager", "lora_adapters": " /a, /b ", "engine_args": '{"max_num_seqs": 8}'}
    assert backend_options(**filled) == {
        "max_concurrent": 2, "max_model_len": 4096, "kv_cache_space_gb": 1.5, "gpu_memory_utilization": 0.8,
        "tensor_parallel_size": 2, "enforce_eager": True, "lora_adapters": "/a, /b", "engine_args": {"max_num_seqs": 8},
    }
    assert backend_options(enforce_eager="compiled") == {"enforce_eager": False}
    with pytest.raises(ConfigError, match="must be a JSON object"):
        backend_options(engine_args="[8]")


def test_the_message_box_offers_exactly_the_kinds_the_model_reads():
    text_only = message_box_for([])
    assert text_only["sources"] == ["upload"] and "load a multimodal model" in text_only["placeholder"]
    assert {".pdf", ".docx", ".txt", ".md", ".py"} <= set(text_only["file_types"]) and "image" not in text_only["file_types"]
    vision = message_box_for(["image", "video"])
    assert vision["sources"] == ["upload"] and vision["file_types"][:2] == ["image", "video"] and ".pdf" in vision["file_types"]
    assert vision["placeholder"].startswith("Message (text, images, videos, documents)")
    assert message_box_for(["audio"])["sources"] == ["upload", "microphone"]


async def test_a_message_while_a_model_loads_says_so_and_is_kept():
    loading_models = LoadedModels()
    with load_held(loading_models):
        session = ChatSession()
        await run(ChatHandlers(loading_models, CONTROLS).send(session, message("Hello?"), **settings()))
        [asked] = session.turns
        assert asked.content == "Hello?" and "is loading" in asked.error and "Try again" in asked.error
        assert "Loading SmolLM2-135M-Instruct (embedded)" in loading_models.describe()
    loading_models.unload()


def test_the_stats_line_says_how_a_reply_was_written():
    stats = ReplyStats(tokens=42, tokens_per_second=118.25, first_token_seconds=0.0853, backend="llamacpp", finish_reason="stop")
    assert stats.line() == "42 tokens · 118.2 tokens/s · first token 85 ms · llamacpp"
    assert stats.model_copy(update={"finish_reason": "length", "first_token_seconds": 1.26}).line() == (
        "42 tokens (max_new_tokens reached) · 118.2 tokens/s · first token 1.3 s · llamacpp")
    one_token = ReplyStats(tokens=1, tokens_per_second=None, first_token_seconds=0.2, backend="vllm", finish_reason="stopped")
    assert one_token.line() == "■ stopped after 1 tokens · first token 200 ms · vllm"
    taken_up = stats.model_copy(update={"prompt_tokens": 3018, "cached_tokens": 2560})
    assert taken_up.line() == "42 tokens · 118.2 tokens/s · first token 85 ms · 3,018-token prompt, 2,560 cached · llamacpp"
    assert stats.model_copy(update={"prompt_tokens": 31, "cached_tokens": 0}).line().endswith("first token 85 ms · 31-token prompt · llamacpp")
    with pytest.raises(ValueError, match="backend"):  # what a conversation file may not slip into the page
        ReplyStats(**{**one_token.model_dump(), "backend": "<img src=x>"})


async def test_a_hub_model_not_on_this_machine_is_refused_at_once_and_a_cached_one_loads(handlers, loaded_models, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    engine = loaded_models.model.engine
    started = time.perf_counter()
    status = handlers.load("auto", "HuggingFaceTB/SmolLM2-360M-Instruct", "auto", progress=no_progress)["status"]
    assert time.perf_counter() - started < 5, "an offline Hub load must fail at once"
    assert "**Could not load:** HuggingFaceTB/SmolLM2-360M-Instruct is not on this machine" in status and "HF_HUB_OFFLINE is set" in status
    assert "Loaded SmolLM2-135M-Instruct (embedded) on huggingface" in status and loaded_models.model.engine is engine
    session = ChatSession()
    await run(handlers.send(session, message("Still there?"), **settings(4)))
    assert session.turns[-1].content and session.turns[-1].stats.backend == "huggingface"

    # What the model picker lists from the Hugging Face cache loads by name, offline.
    cache_model(tmp_path / "hub", "org/SmolLM2-cached", Path(engine.model_path))
    status = handlers.load("auto", "org/SmolLM2-cached", "bfloat16", progress=no_progress)["status"]
    assert status.startswith("✓ Loaded org/SmolLM2-cached on huggingface (auto: not a GGUF file)"), status
    assert loaded_models.model.model_id == "org/SmolLM2-cached"


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [("temperature", -1, "temperature must be in [0, 2]"), ("top_p", 5, "top_p must be in (0, 1]"),
     ("top_k", -1, "top_k must be in [0, "), ("max_new_tokens", -3, "max_new_tokens must be in [1, "),
     ("repetition_penalty", 0, "repetition_penalty must be in [0.01, 2]"), ("seed", 2**80, "seed must be in [0, "),
     ("max_new_tokens", 2.5, "max_new_tokens must be a whole number"), ("temperature", float("nan"), "temperature must be")],
)
async def test_out_of_range_settings_are_explained_on_the_message(handlers, setting, value, named):
    session = ChatSession()
    await run(handlers.send(session, message("Hi"), **{**settings(), setting: value}))
    [asked] = session.turns
    assert named in asked.error


def test_out_of_range_backend_options_are_explained_and_the_model_kept(handlers, loaded_models):
    engine = loaded_models.model.engine
    for options, named in [({"max_concurrent": -2}, "max_concurrent must be in [1, 1024]"),
                           ({"max_model_len": 2**40}, "max_model_len must be in [1, "),
                           ({"max_concurrent": 2.5}, "max_concurrent must be a whole number")]:
        status = handlers.load("huggingface", "", "bfloat16", progress=lambda *a, **k: None, **options)["status"]
        assert named in status and loaded_models.model.engine is engine


def test_a_page_request_counts_for_its_login_else_its_address():
    """Whom the waiting line counts a page request for (its share of the line, its turn)."""
    client = {"host": "10.0.0.7", "port": 50000}
    assert page_user(gr.Request(username="alice", client=client)) == "login alice"
    assert page_user(gr.Request(client=client)) == "address 10.0.0.7"
    assert page_user(None) is None


def test_a_continued_replys_stats_cover_both_parts():
    first = ReplyStats(tokens=11, tokens_per_second=10.0, first_token_seconds=0.2, backend="huggingface", finish_reason="length")
    more = ReplyStats(tokens=21, tokens_per_second=20.0, first_token_seconds=0.5, backend="huggingface", finish_reason="stop")
    whole = more.after(first)
    assert (whole.tokens, whole.first_token_seconds, whole.finish_reason) == (32, 0.2, "stop")
    # 10 tokens after the first in 1 s, then 20 in 1 s; the second part's wait for its first token is not writing.
    assert whole.tokens_per_second == pytest.approx(15.0)
    assert more.after(None) == more
