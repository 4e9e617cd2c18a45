"""The remote backend in front of `vllm serve` (the CPU build the tests install), as a user runs it
before a vLLM server: the engine contract through it, and Stop seen in vLLM's own counters."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import time

import httpx
import pytest
from PIL import Image

from engines import ChatModel, ChatRequest, ConfigError, Response
from engines.compaction import Compaction
from engines.backends.remote import as_sent
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract
from harness.vllm_server import MODEL, VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.server,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM: bash scripts/setup.sh --vllm")]
KEY = "vllm-key-81d0"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with VllmServer(tmp_path_factory.mktemp("vllm-serve") / "vllm.log", KEY) as started:
        yield started


@pytest.fixture(scope="module")
def through_vllm(server):
    with ChatModel({"model_name_or_path": f"{server.url}/v1", "remote_api_key": KEY}) as model:
        yield model


class TestRemoteVllmContract(EngineContract):
    """Prompt lengths are vLLM's own count of the conversation as the remote backend sends it
    (its /tokenize): vLLM renders with the model's own template, which for SmolLM2 leaves tools
    out (anychat adds a prompt for them where a template ignores them)."""

    renders_prompts = False
    prompt_lists_tools = False

    @pytest.fixture
    def model(self, through_vllm):
        return through_vllm

    @pytest.fixture(autouse=True)
    def counting_with(self, server):
        self.server = server

    def prompt_token_count(self, model, messages, system=None, tools=None, continue_final_message=False) -> int:
        request = ChatRequest.build(messages, system=system, tools=tools, continue_final_message=continue_final_message)
        body = {"model": MODEL, "messages": [as_sent(message) for message in request.messages], "tools": request.tools,
                "add_generation_prompt": not continue_final_message, "continue_final_message": continue_final_message}
        return httpx.post(f"{self.server.url}/tokenize", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60).json()["count"]

    def test_media_for_text_only_model_is_refused(self, model):
        """vLLM's model list does not say what a model reads: the image goes, and vLLM's refusal is the message."""
        picture = io.BytesIO()
        Image.new("RGB", (8, 8), "red").save(picture, format="PNG")
        with pytest.raises(ConfigError, match=r"The remote server refused the request \(400\): "):
            model.chat(QUESTION, images=[picture.getvalue()])


def test_the_servers_context_and_model(through_vllm):
    assert through_vllm.model_id == MODEL and through_vllm.context_length == 2048


async def test_a_chat_past_the_servers_context_is_compacted_by_the_servers_own_count(through_vllm):
    """vLLM counts a chat's prompt itself (its /tokenize, the model's template): compaction goes by
    that count, says it is no estimate, and the compacted prompt is the length vLLM then reads."""
    history = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "My name is Ada."}]
    while through_vllm.count_prompt_tokens(ChatRequest.build(history)) < 1750:
        history += [{"role": "assistant", "content": "Noted. " + "The river runs past the old mill. " * 8},
                    {"role": "user", "content": f"Tell me about river {len(history)}."}]
    assert through_vllm.counts_prompts_exactly
    request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8)
    items = [item async for item in through_vllm.astream_reply(request)]
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    [response] = [item for item in items if isinstance(item, Response)]
    assert compaction.replaced > 0 and compaction.summary.strip() and not compaction.estimated
    assert response.prompt_length == compaction.tokens_after <= 0.6 * 2048


async def test_stop_ends_the_reply_in_vllm_by_its_own_count(through_vllm, server):
    stream = through_vllm.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=1500)
    async for piece in stream:
        if piece:
            break
    assert server.running() == 1
    await stream.aclose()
    deadline = time.monotonic() + 20
    while server.running() != 0:
        assert time.monotonic() < deadline, "vLLM still runs the reply that was stopped"
        await asyncio.sleep(0.2)
