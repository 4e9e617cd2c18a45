"""The remote backend (engines/backends/remote.py) against real servers started here: a second
anychat (``app.py api``) serving the embedded SmolLM2, with an API key and one place in its line, so
that its own refusals show what it is running. The engine contract holds through it; what the
remote backend adds (the key, Stop reaching the server, the server's faults) has tests of its own.
Faults a real server cannot be made to show on demand (a stream cut mid-reply, garbage, silence,
a flood, a redirect) come from FAKE_UPSTREAM, a small server written for that and named as such."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from types import SimpleNamespace
from urllib.parse import urlparse

import gradio as gr
import openai
import psutil
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse

from api import add_api
from engines import (ChatError, ChatModel, ChatRequest, ConfigError, KeepSettings, LoadedModels, MediaError, ModelBusyError, ModelLoadError,
                     Response, UnsupportedError)
from engines.compaction import Compaction
from engines.backends import remote
from engines.model_files.model_args import ModelArgs
from engines.prompt.media import wav_bytes
from harness.browser import AppProcess, free_port
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract
from harness.running_server import running_server
from tests.page_input import CONTROLS, message, run, settings
from chat.session import ChatSession
from webui.handlers import ChatHandlers
from webui.model_picker import server_models
from webui.model_rights import ModelRights

# Every test talks to a server: a second anychat, or FAKE_UPSTREAM.
pytestmark = pytest.mark.server
KEY = "upstream-key-5f2c"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A second anychat on the embedded model: one reply at a time and none waiting, so that a
    request sent to it while it writes another is refused (503) by its own line."""
    server = AppProcess(tmp_path_factory.mktemp("upstream"), ("api", "--api-key", KEY, "--max-waiting", "0"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def address(upstream):
    return upstream.url + "v1"


@pytest.fixture(scope="module")
def remote_model(address):
    with ChatModel({"model_name_or_path": address, "remote_api_key": KEY}) as model:
        yield model


@pytest.fixture(scope="module")
def reference():
    """The same model in this process, on the backend the upstream chose, to count prompt tokens
    (the remote engine has no tokenizer: the upstream's counts are what is checked)."""
    with ChatModel() as model:
        yield model


@pytest.fixture
def direct(address):
    return openai.OpenAI(base_url=address, api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, address):
    """A third anychat, whose model is the upstream's through the remote backend (its key from the environment)."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("ANYCHAT_REMOTE_API_KEY", KEY)
        server = AppProcess(tmp_path_factory.mktemp("gateway"), ("api", "--model", address))
    try:
        yield server
    finally:
        server.stop()


class TestRemoteContract(EngineContract):
    renders_prompts = False

    @pytest.fixture
    def model(self, remote_model):
        return remote_model

    @pytest.fixture(autouse=True)
    def counting_with(self, reference):
        self.reference = reference

    def prompt_token_count(self, model, messages, **kwargs) -> int:
        return super().prompt_token_count(self.reference, messages, **kwargs)


def test_the_servers_model_under_its_own_name_and_the_key_never_shown(remote_model, address, upstream):
    assert remote_model.backend == "remote" and remote_model.backend_reason == "auto: the address of a server"
    assert remote_model.model_id == "SmolLM2-135M-Instruct"
    assert KEY not in repr(remote_model.model_args) and KEY not in remote_model.display_name
    assert KEY not in upstream.log()


def test_replies_are_the_servers_own(remote_model, reference, direct):
    """Greedy, the reply through the remote backend is the upstream's word for word, with its
    token counts; and the same as the model in this process on the same file writes."""
    [through] = remote_model.chat(QUESTION, temperature=0, max_new_tokens=24)
    straight = direct.chat.completions.create(model="SmolLM2-135M-Instruct", messages=QUESTION, temperature=0, max_tokens=24)
    assert through.response_text == straight.choices[0].message.content == reference.chat(QUESTION, temperature=0, max_new_tokens=24)[0].response_text
    assert (through.prompt_length, through.response_length) == (straight.usage.prompt_tokens, straight.usage.completion_tokens)


async def test_stop_ends_the_reply_on_the_server(remote_model, direct):
    """While a reply streams, the upstream's only place is taken (it refuses another request);
    once the stream is closed, the upstream takes requests again: it stopped generating."""
    stream = remote_model.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=2000)
    pieces = [piece async for piece in _first(stream, 3)]
    assert len(pieces) == 3
    with pytest.raises(openai.APIStatusError) as refused:
        await asyncio.to_thread(direct.chat.completions.create, model="SmolLM2-135M-Instruct", messages=QUESTION, max_tokens=2)
    assert refused.value.status_code == 503
    await stream.aclose()
    assert remote_model.engine.unfinished_requests() == 0
    deadline = time.monotonic() + 20
    while True:
        try:
            answer = await asyncio.to_thread(direct.chat.completions.create, model="SmolLM2-135M-Instruct", messages=QUESTION, max_tokens=2)
            break
        except openai.APIStatusError as busy:
            assert busy.status_code == 503 and time.monotonic() < deadline, "the server still writes the reply that was stopped"
            await asyncio.sleep(0.2)
    assert answer.usage.completion_tokens == 2


async def _first(stream, count):
    async for piece in stream:
        yield piece
        count -= 1
        if not count:
            return


def test_a_chats_prompt_is_counted_by_the_server_itself(remote_model):
    """anychat counts a chat's prompt for another in front of it (/v1/tokenize, as vLLM's
    /tokenize): the count is the upstream model's own, which a compaction goes by, also for the
    code and CJK text that four bytes a token miscounts; asked with what the template reads
    besides the messages (chat_template_kwargs), as the reply is."""
    request = ChatRequest.build([{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "数一数: 一二三四五六七八九十. def f(x): return {k: v**2 for k, v in x.items()}"}],
                                temperature=0, max_new_tokens=2, enable_thinking=False)
    counted = remote_model.count_prompt_tokens(request)
    assert remote_model.counts_prompts_exactly
    [reply] = remote_model.chat(request)
    assert reply.prompt_length == counted


async def test_a_long_chat_through_a_remote_server_is_compacted_by_its_count_and_never_refused(tmp_path):
    """A chat past the context of a second anychat (1,024 tokens) goes on through the remote
    backend: compacted by the upstream's own count, its head kept, no turn refused."""
    small = AppProcess(tmp_path, ("api", "--api-key", KEY, "--max-model-len", "1024"))
    try:
        with ChatModel({"model_name_or_path": small.url + "v1", "remote_api_key": KEY}) as model:
            assert model.context_length == 1024
            history = [{"role": "system", "content": "The secret word is PLUM."}, {"role": "user", "content": "My name is Ada."}]
            compactions = []
            for turn in range(8):
                request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8)
                items = [item async for item in model.astream_reply(request)]
                [reply] = [item for item in items if isinstance(item, Response)]
                assert reply.response_text.strip() and reply.prompt_length + reply.response_length <= 1024
                for compaction in (item for item in items if isinstance(item, Compaction)):
                    compactions.append(compaction)
                    history = list(compaction.messages)
                history += [{"role": "assistant", "content": reply.response_text},
                            {"role": "user", "content": f"Note {turn}: " + "the keeper logged a ship passing the rocks at dawn. " * 12}]
            assert compactions and not any(compaction.estimated for compaction in compactions)
            assert all(compaction.messages[0]["content"] == "The secret word is PLUM." and compaction.messages[1]["content"] == "My name is Ada."
                       for compaction in compactions)
    finally:
        small.stop()


def test_a_wrong_key_an_unknown_model_and_no_server_are_clear_load_errors(address):
    with pytest.raises(ModelLoadError, match="refused the API key"):
        ChatModel({"model_name_or_path": address, "remote_api_key": "wrong"})
    with pytest.raises(ModelLoadError, match="does not serve 'other'; it serves SmolLM2-135M-Instruct"):
        ChatModel({"model_name_or_path": address, "remote_api_key": KEY, "remote_model": "other"})
    with pytest.raises(ModelLoadError, match="Could not reach a server at http://127.0.0.1:"):
        ChatModel({"model_name_or_path": f"http://127.0.0.1:{free_port()}/v1"})
    with pytest.raises(ConfigError, match="http:// or https:// address"):
        ChatModel({"model_name_or_path": "file:///etc/passwd", "infer_backend": "remote"})


def test_what_the_server_refuses_is_its_own_message(remote_model):
    with pytest.raises(UnsupportedError, match="lora_adapter is not supported by the remote engine"):
        remote_model.chat(QUESTION, lora_adapter="x")
    long = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(ConfigError, match=r"The remote server refused the request \(400\): .*limit of 8192 tokens"):
        remote_model.chat(long, max_new_tokens=4)


# ---- faults, from FAKE_UPSTREAM

def _events(*events, done=True):
    lines = [f"data: {json.dumps(event)}\n\n" for event in events] + (["data: [DONE]\n\n"] if done else [])
    return "".join(lines)


def _chunk(content=None, finish=None, **delta):
    return {"choices": [{"index": 0, "delta": {**({"content": content} if content else {}), **delta}, "finish_reason": finish}]}


def fake_upstream() -> FastAPI:
    """FAKE_UPSTREAM: an OpenAI-shaped server whose model names the fault it shows."""
    app = FastAPI()
    # As llama-cpp-python's server: after a reply it failed, the next request is dropped after its
    # 200 (there it is the one sent on the failed reply's connection; here whichever comes next, so
    # that the test does not hang on the connection being kept alive between two calls).
    failed_replies: list[int] = []
    dropped_on: list[int] = []

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model"} for name in
                                           ("fine", "cut", "empty", "garbage", "silent", "flood", "redirect", "failing", "busy", "parts", "markers", "echo",
                                            "flaky", "dropped", "broken")]}

    @app.get("/elsewhere/v1/models")
    async def elsewhere():
        return RedirectResponse("/v1/models", status_code=307)

    @app.get("/huge/v1/models")
    async def huge():
        return JSONResponse({"data": [{"id": "x" * 1000}] * 2000})

    @app.post("/v1/chat/completions")
    async def chat(body: dict, request: Request):
        fault = body["model"]
        port = request.client.port
        if fault == "redirect":
            return RedirectResponse("http://example.com/v1/chat/completions", status_code=307)
        if fault == "failing":
            return JSONResponse({"error": {"message": "the GPU fell over"}}, status_code=500)
        if fault == "busy":
            return JSONResponse({"error": {"message": "too many requests"}}, status_code=429)

        async def body_of():
            if fault == "fine":
                yield _events(_chunk("Hello"), _chunk(" there", "stop"), {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
            elif fault == "parts":
                yield _events(_chunk(reasoning_content="Thinking it over."), _chunk("Let me look."),
                              _chunk(tool_calls=[{"index": 0, "id": "x", "function": {"name": "get_weather", "arguments": '{"city": '}}]),
                              _chunk(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}], finish="tool_calls"))
            elif fault == "markers":  # reasoning that holds the markers a model's text is read by
                yield _events(_chunk(reasoning_content=MARKED_REASONING[:9]), _chunk(reasoning_content=MARKED_REASONING[9:]), _chunk("\n\nDone."),
                              _chunk(tool_calls=[{"index": 0, "id": "call_upstream_1", "function": {"name": "get_weather", "arguments": ""}}]),
                              _chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]),
                              _chunk(tool_calls=[{"index": 1, "id": "call_upstream_2", "function": {"name": "get_time", "arguments": "{}"}}],
                                     finish="tool_calls"))
            elif fault == "echo":  # what it was sent, as the reply
                yield _events(_chunk(json.dumps(body["messages"]), "stop"))
            elif fault == "cut":
                yield _events(_chunk("Hello"), done=False)
            elif fault == "empty":  # as llama-cpp-python's server, failing on what it was sent after its 200
                yield _events(_chunk(role="assistant"), done=False)
            elif fault == "garbage":
                yield "data: <html>not json</html>\n\n"
            elif fault == "silent":
                yield _events(_chunk("Hello"), done=False)
                await asyncio.sleep(3600)
            elif fault == "dropped" or (fault == "flaky" and failed_replies):
                failed_replies.clear()
                dropped_on.append(port)
                # After its 200, before any event: uvicorn closes the connection on this error.
                raise RuntimeError("FAKE_UPSTREAM drops this reply after its headers")
            elif fault == "flaky" and body["messages"][-1]["content"] == "Fail.":
                failed_replies.append(port)
                yield _events(_chunk(role="assistant"), done=False)
            elif fault == "flaky":  # the connection it came on, and those dropped
                yield _events(_chunk(json.dumps({"connection": port, "dropped": dropped_on}), "stop"))
            elif fault == "broken":
                yield _events(_chunk("Hello"), done=False)
                raise RuntimeError("FAKE_UPSTREAM breaks this reply after its first event")
            elif fault == "flood":
                piece = _events(_chunk("x" * 60_000), done=False)
                while True:
                    yield piece
                    await asyncio.sleep(0)

        return StreamingResponse(body_of(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def faulty():
    with running_server(fake_upstream()) as url:
        yield url


@pytest.fixture
def small_limits(monkeypatch):
    """Silence and floods noticed sooner than in use, and a busy server not asked again for long."""
    monkeypatch.setattr(remote, "SILENCE_SECONDS", 2.0)
    monkeypatch.setattr(remote, "MAX_REPLY_BYTES", 4 << 20)
    monkeypatch.setattr(remote, "BUSY_WAIT_SECONDS", 1.0)


def test_each_fault_of_the_server_is_a_clear_error_and_the_engine_goes_on(faulty, small_limits):
    expected = {
        "cut": (ChatError, "ended the reply before finishing it"),
        "empty": (ChatError, "ended the reply without writing any of it: it may not read what was sent"),
        "garbage": (ChatError, "something other than OpenAI's events"),
        "silent": (ChatError, "sent nothing for too long"),
        "flood": (ChatError, "more than 4 MiB"),
        "redirect": (ChatError, "redirects are not followed"),
        "dropped": (ChatError, "could not be reached or cut the reply off: peer closed connection"),
        "failing": (ChatError, r"failed \(500\): the GPU fell over"),
        "busy": (ModelBusyError, r"busy \(429\), still after 1 s: too many requests"),
    }
    for fault, (error, said) in expected.items():
        with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": fault}) as model:
            with pytest.raises(error, match=said):
                model.chat(QUESTION, max_new_tokens=8)
            with pytest.raises(error, match=said):
                "".join(model.stream_chat(QUESTION, max_new_tokens=8))
            assert model.engine.unfinished_requests() == 0 and (model.line.running, model.line.waiting) == (0, 0)
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "fine"}) as model:
        [reply] = model.chat(QUESTION, max_new_tokens=8)
        assert (reply.response_text, reply.prompt_length, reply.response_length) == ("Hello there", 7, 2)
    with pytest.raises(ModelLoadError, match="redirects are not followed"):
        ChatModel({"model_name_or_path": f"{faulty}/elsewhere/v1"})
    with pytest.raises(ModelLoadError, match="more than 1 MiB for its list of models"):
        ChatModel({"model_name_or_path": f"{faulty}/huge/v1"})


def test_a_hundred_faults_leave_no_thread_task_or_connection_behind(faulty, small_limits):
    """Each cycle, every quick fault once streamed and once whole (and every tenth, a model loaded and closed):
    afterwards the process has the threads and TCP connections it had after the first cycle,
    and each engine's loop runs no task."""
    faults = ("cut", "garbage", "failing", "redirect")
    models = {fault: ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": fault}) for fault in faults}
    me = psutil.Process()

    def cycle(number):
        for model in models.values():
            with pytest.raises(ChatError):
                model.chat(QUESTION, max_new_tokens=8)
            with pytest.raises(ChatError):
                "".join(model.stream_chat(QUESTION, max_new_tokens=8))
        if number % 10 == 0:  # a load and a close: a tenth of the cycles (each close collects the garbage: a second)
            ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "fine"}).close()

    fake_port = urlparse(faulty).port

    def counted():
        running = sum(model._loop.call(_tasks_besides_this_one()) for model in models.values())
        # Thread pools start their workers as work comes, up to their bound: those are no leak.
        threads = [thread.name for thread in threading.enumerate() if not thread.name.startswith(("asyncio_", "ThreadPoolExecutor-"))]
        # The fake server's own ends of its connections are not the engines': it closes them on
        # its own thread once it sees the client gone (under a CPU hog, three were still open).
        ours = [connection for connection in me.net_connections(kind="tcp") if connection.laddr.port != fake_port]
        return sorted(threads), len(ours), running

    try:
        cycle(0)
        before = counted()
        for number in range(1, 101):
            cycle(number)
        assert counted() == before
        assert before[2] == 0
    finally:
        for model in models.values():
            model.close()


def test_a_reply_cut_before_its_first_event_is_asked_again_on_another_connection(faulty):
    """As llama-cpp-python's server does to the request after a reply it failed, sent on its kept
    connection (``flaky``): its 200, then the connection closed. It is asked again, on another
    connection, and answered, whole or streamed. One cut after its first word is not asked again
    (the word would be written twice): it is an error, as is one cut each time (``dropped``, among
    the faults above)."""
    fail = [{"role": "user", "content": "Fail."}]
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "flaky"}) as model:
        with pytest.raises(ChatError, match="without writing any of it"):
            model.chat(fail, max_new_tokens=8)
        [whole] = model.chat(QUESTION, max_new_tokens=8)
        with pytest.raises(ChatError, match="without writing any of it"):
            model.chat(fail, max_new_tokens=8)
        streamed = "".join(model.stream_chat(QUESTION, max_new_tokens=8))
    whole, streamed = json.loads(whole.response_text), json.loads(streamed)
    assert whole["dropped"][-1] != whole["connection"] and streamed["dropped"][-1] != streamed["connection"]
    assert streamed["dropped"][:-1] == whole["dropped"]
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "broken"}) as model:
        written = []
        with pytest.raises(ChatError, match="cut the reply off: peer closed connection"):
            for piece in model.stream_chat(QUESTION, max_new_tokens=8):
                written.append(piece)
        assert written == ["Hello"]


async def _tasks_besides_this_one() -> int:
    return len(asyncio.all_tasks()) - 1


async def test_a_remote_server_is_sent_many_requests_at_once_unless_told_otherwise(faulty, monkeypatch):
    """The server batches: by default 16 requests go to it at once (a local model takes one),
    seen as two replies the fake server holds open both under way; --max-concurrent (or
    MAX_CONCURRENT) still says how many."""
    monkeypatch.delenv("MAX_CONCURRENT", raising=False)
    assert ModelArgs(model_name_or_path=f"{faulty}/v1").max_concurrent == 16 and ModelArgs().max_concurrent == 1
    assert ModelArgs(model_name_or_path=f"{faulty}/v1", max_concurrent=2).max_concurrent == 2
    monkeypatch.setenv("MAX_CONCURRENT", "3")
    assert ModelArgs(model_name_or_path=f"{faulty}/v1").max_concurrent == 3
    monkeypatch.delenv("MAX_CONCURRENT")
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "silent"}) as model:
        streams = [model.astream_chat(QUESTION, max_new_tokens=8) for _ in range(2)]
        try:
            firsts = await asyncio.wait_for(asyncio.gather(*(anext(stream) for stream in streams)), 30)
            assert firsts == ["Hello", "Hello"] and model.engine.unfinished_requests() == 2
        finally:
            for stream in streams:
                await stream.aclose()


def test_reasoning_and_tool_calls_sent_as_parts_are_read_as_on_a_local_model(faulty):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "parts"}) as model:
        [reply] = model.chat(QUESTION, tools=tools)
        streamed = list(model.stream_reply(QUESTION, tools=tools))
    assert reply.parts.reasoning == "Thinking it over." and reply.parts.content == "Let me look."
    assert [(call.name, json.loads(call.arguments)) for call in reply.parts.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert streamed[-1].parts == reply.parts
    assert [chunk.kind for chunk in streamed[:-1]][:2] == ["reasoning", "content"]


MARKED_REASONING = 'Is </think> a tag? <tool_call>{"name": "x"}</tool_call> is not a call.'


def test_parts_sent_apart_are_handed_on_as_they_are_not_read_again_as_text(faulty):
    """Reasoning the server sent apart is never read for markers, and its tool calls keep the
    server's ids, whole and streamed; the raw text of such a reply is the answer alone."""
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in ("get_weather", "get_time")]
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "markers"}) as model:
        [whole] = model.chat(QUESTION, tools=tools)
        streamed = list(model.stream_reply(QUESTION, tools=tools))
        raw = "".join(model.stream_chat(QUESTION, tools=tools))
    for reply in (whole, streamed[-1]):
        assert (reply.parts.reasoning, reply.parts.content) == (MARKED_REASONING, "Done.")
        assert [(call.id, call.name, call.arguments) for call in reply.parts.tool_calls] == [
            ("call_upstream_1", "get_weather", '{"city": "Oslo"}'), ("call_upstream_2", "get_time", "{}")]
    assert whole.response_text == raw == "\n\nDone."
    chunks = streamed[:-1]
    assert "".join(chunk.text for chunk in chunks if chunk.kind == "reasoning") == MARKED_REASONING
    assert [chunk.kind for chunk in chunks] == ["reasoning", "reasoning", "content", "tool_call", "tool_call", "tool_call"]


def test_media_go_as_content_parts_where_their_placeholders_are(faulty, tmp_path):
    from PIL import Image

    picture = tmp_path / "red.jpg"
    Image.new("RGB", (8, 8), "red").save(picture)
    samples = ([0.0, 0.5, -0.5, 0.0], 8000)
    video = b"\x00\x00\x00\x18ftypmp42" + bytes(32)
    with ChatModel({"model_name_or_path": f"{faulty}/v1", "remote_model": "echo"}) as model:
        [reply] = model.chat([{"role": "user", "content": "Compare <image> with <image>, hear <audio>, watch <video>."}],
                             images=[str(picture), Image.new("RGB", (4, 4))], audios=[samples], videos=[video])
        with pytest.raises(MediaError, match="neither WAV nor MP3"):
            model.chat([{"role": "user", "content": "Hear <audio>."}], audios=[b"OggS" + bytes(40)])
    [asked] = json.loads(reply.response_text)
    kinds = [part["type"] for part in asked["content"]]
    assert kinds == ["text", "image_url", "text", "image_url", "text", "input_audio", "text", "video_url", "text"]
    texts = [part["text"] for part in asked["content"] if part["type"] == "text"]
    assert texts == ["Compare ", " with ", ", hear ", ", watch ", "."]
    first, second = (part["image_url"]["url"] for part in asked["content"] if part["type"] == "image_url")
    assert base64.b64decode(first.removeprefix("data:image/jpeg;base64,")) == picture.read_bytes()
    assert second.startswith("data:image/png;base64,")
    [audio] = [part["input_audio"] for part in asked["content"] if part["type"] == "input_audio"]
    assert audio["format"] == "wav" and base64.b64decode(audio["data"]) == wav_bytes(*samples)
    [sent_video] = [part["video_url"]["url"] for part in asked["content"] if part["type"] == "video_url"]
    assert base64.b64decode(sent_video.removeprefix("data:video/mp4;base64,")) == video


def test_our_api_in_front_of_a_remote_server_serves_the_same_requests(gateway, direct):
    """A gateway: the official client through one anychat to another gets the upstream's replies,
    streamed and whole, and a client that leaves mid-stream ends the reply upstream too."""
    through = openai.OpenAI(base_url=gateway.url + "v1", api_key="unused", max_retries=0)
    [card] = through.models.list().data
    assert (card.id, card.input_modalities) == ("SmolLM2-135M-Instruct", ["text"])
    asked = {"model": card.id, "messages": QUESTION, "temperature": 0, "max_tokens": 16}
    whole = through.chat.completions.create(**asked)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in through.chat.completions.create(**asked, stream=True) if chunk.choices)
    straight = direct.chat.completions.create(**asked)
    assert whole.choices[0].message.content == streamed == straight.choices[0].message.content
    assert whole.usage.prompt_tokens == straight.usage.prompt_tokens
    assert KEY not in gateway.log()

    with through.chat.completions.create(model=card.id, messages=LONG_REQUEST, temperature=0, max_tokens=2000, stream=True) as stream:
        next(iter(stream))
        with pytest.raises(openai.APIStatusError) as refused:
            direct.chat.completions.create(model=card.id, messages=QUESTION, max_tokens=2)
        assert refused.value.status_code == 503
    deadline = time.monotonic() + 20
    while True:
        try:
            direct.chat.completions.create(model=card.id, messages=QUESTION, max_tokens=2)
            break
        except openai.APIStatusError as busy:
            assert busy.status_code == 503 and time.monotonic() < deadline, "the upstream still writes the reply whose client left"
            time.sleep(0.2)


async def test_the_page_loads_a_remote_server_and_chats_through_it(address, direct):
    """The Settings tab's Load with the remote backend, its key in the password field: the status
    names the server (never the key), and a chat's reply is the server's, with its stats."""
    loaded_models = LoadedModels()
    handlers = ChatHandlers(loaded_models, CONTROLS)
    try:
        shown = handlers.load("remote", address, "auto", remote_api_key=f"  {KEY} ", progress=lambda *a, **k: None)
        assert shown["status"].startswith(f"✓ Loaded {address} on remote in ") and "Reads text." in shown["status"]
        assert KEY not in json.dumps(shown, default=str)
        session = ChatSession()
        await run(handlers.send(session, message("Name three colors."), **settings(12)))
        straight = direct.chat.completions.create(model="SmolLM2-135M-Instruct", messages=QUESTION, temperature=0, max_tokens=12)
        assert session.turns[1].content == straight.choices[0].message.content
        assert (session.turns[1].stats.tokens, session.turns[1].stats.backend) == (straight.usage.completion_tokens, "remote")
        refused = handlers.load("remote", address, "auto", remote_api_key="wrong", progress=lambda *a, **k: None)["status"]
        assert "refused the API key" in refused and "wrong" not in refused and f"Loaded {address} on remote" in refused
    finally:
        loaded_models.unload()


def test_a_remote_model_and_a_local_one_are_served_side_by_side(address, direct):
    """Several models at once mix backends: the API answers each by its name, the remote one
    with the server's reply, the local one from this process."""
    loaded_models = LoadedModels(keep=KeepSettings(models_memory=64 << 30))
    try:
        loaded_models.load({"served_model_name": "local"})
        remote_id = loaded_models.load({"model_name_or_path": address, "remote_api_key": KEY}).model_id
        with running_server(add_api(FastAPI(), loaded_models)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            assert [card.id for card in client.models.list().data] == [remote_id, "local"]
            asked = {"messages": QUESTION, "temperature": 0, "max_tokens": 8}
            through = client.chat.completions.create(model=remote_id, **asked)
            local = client.chat.completions.create(model="local", **asked)
        straight = direct.chat.completions.create(model=remote_id, **asked)
        assert (through.model, local.model) == (remote_id, "local")
        assert through.choices[0].message.content == straight.choices[0].message.content
        assert local.usage.completion_tokens == 8 and local.choices[0].message.content
    finally:
        loaded_models.unload()


def test_an_admin_lists_a_servers_models_for_the_settings_tab(address):
    listed = server_models(ModelRights(), address, KEY)
    assert (listed["choices"], listed["value"]) == (["SmolLM2-135M-Instruct"], "SmolLM2-135M-Instruct")
    with pytest.raises(gr.Error, match="refused the API key"):
        server_models(ModelRights(), address, "wrong")
    with pytest.raises(gr.Error, match="a server's address into the Model field"):
        server_models(ModelRights(), "/models/smol.gguf", KEY)
    visitor = ModelRights(admins={"alice"})
    with pytest.raises(gr.Error, match="may not load or unload models"):
        server_models(visitor, address, KEY, SimpleNamespace(username="bob"))


@pytest.mark.parametrize("answer, context", [
    ({"error": {"message": "This model's maximum context length is 2048 tokens. However, you requested 5035 tokens (5031 in the "
                           "messages, 4 in the completion).", "code": "context_length_exceeded"}}, 2048),  # OpenAI's words: vLLM's, llama-cpp-python's
    ({"error": {"message": "The input (9000 tokens) is longer than the model's context length (8192 tokens)."}}, 8192),  # SGLang's
    ({"error": {"code": 400, "message": "request (4476 tokens) exceeds the available context size (4096 tokens)",
                "type": "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096}}, 4096),  # llama.cpp's server
    ({"error": {"message": "The prompt is too long."}}, None),
])
def test_a_refusal_that_says_the_models_context_is_read_for_it(answer, context):
    """What a remote server whose context was not known says of it as it refuses a prompt too long
    (the servers' own words; llama-cpp-python's, through a real server, in test_remote_llamacpp)."""
    assert remote.stated_context(answer, remote.error_message(answer)) == context
