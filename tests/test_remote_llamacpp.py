"""The remote backend in front of llama-cpp-python's own OpenAI server (``python -m llama_cpp.server``,
harness/llamacpp_server.py), as a user runs it: the engine contract through it, and Stop seen in
the server's own log. Its stream does not count the prompt, so the remote backend estimates it:
the contract checks the estimate against the server's own count (its answer to the same request
not streamed)."""

from __future__ import annotations

import asyncio
import json
import importlib.util
import io
import time

import httpx
import pytest
from PIL import Image

from engines import ChatError, ChatModel, ChatRequest, ConfigError, Response
from engines.compaction import Compaction
from engines.backends.remote import as_sent
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract
from harness.llamacpp_server import MODEL, LlamaCppServer

pytestmark = [pytest.mark.server,
              pytest.mark.skipif(importlib.util.find_spec("starlette_context") is None,
                                 reason="needs llama-cpp-python's server: bash scripts/setup.sh --test")]
KEY = "llamacpp-key-3e71"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LlamaCppServer(tmp_path_factory.mktemp("llama-cpp-server") / "server.log", KEY) as started:
        yield started


@pytest.fixture(scope="module")
def through_llamacpp(server):
    with ChatModel({"model_name_or_path": f"{server.url}/v1", "remote_api_key": KEY}) as model:
        yield model


class TestRemoteLlamaCppContract(EngineContract):
    renders_prompts = False
    prompt_lists_tools = False
    continues_replies = False

    @pytest.fixture
    def model(self, through_llamacpp):
        return through_llamacpp

    @pytest.fixture(autouse=True)
    def counting_with(self, server):
        self.server = server

    def prompt_token_count(self, model, messages, system=None, tools=None, continue_final_message=False) -> int:
        """The server's own count of the conversation as the remote backend sends it: the usage of
        its answer, not streamed, of one token."""
        request = ChatRequest.build(messages, system=system, tools=tools, continue_final_message=continue_final_message)
        body = {"model": MODEL, "messages": [as_sent(message) for message in request.messages], "max_tokens": 1}
        if request.tools:
            body["tools"] = request.tools
        answer = httpx.post(f"{self.server.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        return answer.json()["usage"]["prompt_tokens"]

    def assert_prompt_length(self, reply, counted):
        # Estimated (RemoteEngine.count_prompt_tokens) from what is sent, so over the count where the
        # server's template leaves some of it out (SmolLM2's leaves out tools and tool calls).
        assert counted / 2 <= reply.prompt_length <= counted * 4, f"estimated {reply.prompt_length} tokens, the server counted {counted}"

    def test_media_for_text_only_model_is_refused(self, model):
        """The server's model list does not say what a model reads: the image goes, the server
        fails on it without a word, and the message says what may be wrong."""
        with pytest.raises(ChatError, match="ended the reply without writing any of it: it may not read what was sent"):
            model.chat(QUESTION, images=[red_square()])


def red_square() -> bytes:
    picture = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(picture, format="PNG")
    return picture.getvalue()


def test_a_server_that_does_not_count_prompts_gets_them_estimated_and_said_so(through_llamacpp):
    """llama-cpp-python's server has no /tokenize: the prompt is estimated, and the engine says so
    (a compaction then reports its counts as estimates)."""
    assert through_llamacpp.count_prompt_tokens(ChatRequest.build(QUESTION)) > 0
    assert not through_llamacpp.counts_prompts_exactly


def test_the_servers_model_under_its_own_name(through_llamacpp):
    assert through_llamacpp.model_id == MODEL


def test_the_request_after_a_reply_the_server_failed_is_answered(through_llamacpp):
    """The server closes the connection just after a reply it failed (an image its model cannot
    read), and the next request, often already sent on it, dies there, before its 200 or after it:
    it is sent again and answered (6 of 20 runs of this test failed when only one cut before its
    200 was)."""
    for _ in range(5):
        with pytest.raises(ChatError, match="without writing any of it"):
            through_llamacpp.chat(QUESTION, images=[red_square()])
        [reply] = through_llamacpp.chat(QUESTION, temperature=0, max_new_tokens=2)
        assert reply.response_length == 2


async def test_stop_ends_the_reply_in_the_server(through_llamacpp, server):
    """A reply stopped after its first words ends in the server too: it says the client left, and
    the next request is the next generation it finishes (it writes one at a time, so the stopped
    one, 1,500 tokens, would have ended first had it gone on)."""
    before = len(server.decoded())
    stream = through_llamacpp.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=1500)
    async for piece in stream:
        if piece:
            break
    await stream.aclose()
    deadline = time.monotonic() + 20
    while "Disconnected from client" not in server.log():
        assert time.monotonic() < deadline, "the server did not see the client leave"
        await asyncio.sleep(0.2)
    [reply] = await through_llamacpp.achat(QUESTION, temperature=0, max_new_tokens=4)
    assert reply.response_length == 4
    [short] = server.decoded()[before:]
    assert short <= 4



def test_a_reply_format_holds_through_the_servers_own_form_of_it(through_llamacpp):
    """OpenAI's ``json_schema``, which this server refuses, goes again as a ``json_object`` with
    the schema (its form), and the reply is held to it."""
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"], "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "color", "schema": schema, "strict": True}}
    [reply] = through_llamacpp.chat(QUESTION, temperature=0, max_new_tokens=32, response_format=response_format)
    assert json.loads(reply.response_text)["color"] in ("red", "green", "blue")


def long_chat() -> list[dict]:
    """A chat of more than the server's 2,048 tokens, its last message the user's."""
    history = [{"role": "system", "content": "The secret word is PLUM."}, {"role": "user", "content": "My name is Ada."}]
    for turn in range(14):
        history += [{"role": "assistant", "content": f"Noted {turn}."},
                    {"role": "user", "content": f"Note {turn}: " + "the keeper logged a ship passing the rocks at dawn. " * 16}]
    return history


async def test_a_chat_past_a_context_the_server_did_not_say_is_compacted_once_its_refusal_says_it(server):
    """llama-cpp-python's server does not list its model's context: the first prompt past it is
    refused, in words that say the length; the chat is compacted to it and sent again (the user
    sees the compaction, not the refusal), and later chats are fitted before they are sent."""
    with ChatModel({"model_name_or_path": f"{server.url}/v1", "remote_api_key": KEY}) as model:
        assert model.context_length is None
        request = ChatRequest.build(long_chat(), context_policy="compact", temperature=0, max_new_tokens=8)
        items = [item async for item in model.astream_reply(request)]
        [compaction] = [item for item in items if isinstance(item, Compaction)]
        [reply] = [item for item in items if isinstance(item, Response)]
        assert model.context_length == 2048 and compaction.estimated and compaction.messages[:2] == request.messages[:2]
        assert reply.response_text.strip() and reply.prompt_length + reply.response_length <= 2048
    with ChatModel({"model_name_or_path": f"{server.url}/v1", "remote_api_key": KEY}) as model:
        with pytest.raises(ConfigError, match="maximum context length is 2048 tokens"):
            model.chat(ChatRequest.build(long_chat(), context_policy="refuse", max_new_tokens=8))
        assert model.context_length == 2048, "learned, though the chat's policy refuses"
