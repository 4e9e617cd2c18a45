"""LiteLLM (this server as an OpenAI-compatible provider, as agent frameworks use it) against a
real server on the real default model: chat completion, streaming, logprobs, reasoning_effort
and a text completion."""

from __future__ import annotations

import os

# LiteLLM would otherwise fetch its price list from the network at import.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import pytest
from fastapi import FastAPI

from api import add_api
from engines import ChatRequest
from harness.running_server import running_server
from tests.api_samples import QUESTION

litellm = pytest.importorskip("litellm")
API_KEY = "litellm-key"
GREEDY = {"temperature": 0, "max_tokens": 12}


@pytest.fixture(scope="module")
def provider(loaded_models):
    """LiteLLM's arguments that reach this server: its model name and where it is."""
    with running_server(add_api(FastAPI(), loaded_models, api_key=API_KEY)) as url:
        yield {"model": f"openai/{loaded_models.model.model_id}", "api_base": f"{url}/v1", "api_key": API_KEY}


def test_completion_and_stream(provider, chat_model):
    [direct] = chat_model.chat(QUESTION, temperature=0, max_new_tokens=12)
    reply = litellm.completion(messages=QUESTION, **provider, **GREEDY)
    assert reply.choices[0].message.content == direct.response_text
    assert reply.usage.completion_tokens == direct.response_length
    chunks = list(litellm.completion(messages=QUESTION, stream=True, **provider, **GREEDY))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == direct.response_text


def test_logprobs_and_a_refused_reasoning_effort(provider):
    reply = litellm.completion(messages=QUESTION, logprobs=True, top_logprobs=2, **provider, **GREEDY)
    tokens = reply.choices[0].logprobs.content
    assert len(tokens) == reply.usage.completion_tokens
    assert all(len(token.top_logprobs) == 2 and token.logprob == token.top_logprobs[0].logprob for token in tokens)
    # LiteLLM passes reasoning_effort on; the embedded model's template has no thinking switch.
    with pytest.raises(litellm.BadRequestError, match="reasoning_effort is not supported by this model"):
        litellm.completion(messages=QUESTION, reasoning_effort="low", **provider, **GREEDY)


def test_text_completion(provider, chat_model):
    [direct] = chat_model.chat(ChatRequest.completion("The sky is", temperature=0, max_new_tokens=12))
    reply = litellm.text_completion(prompt="The sky is", **provider, **GREEDY)
    assert reply.choices[0].text == direct.response_text
