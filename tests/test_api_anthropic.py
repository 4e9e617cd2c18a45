"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), driven by the official
`anthropic` SDK against a real server on the default model, on transformers and llama.cpp: the
same request path as Chat Completions (the same replies, counts, checks and logins), Anthropic's
shapes and stream events, tools, thinking only in thinking blocks, and what Claude Code sends."""

from __future__ import annotations

import base64
import json

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI

from api import add_api
from engines import LoadedModels
from harness.running_server import running_server
from tests.api_samples import WEATHER_TOOL

pytestmark = pytest.mark.slow

API_KEY = "test-key"
# The SDK no longer sends sampling settings; older clients (and this server) still take them.
GREEDY = {"extra_body": {"temperature": 0}}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"name": "get_weather", "description": WEATHER_TOOL["function"]["description"],
           "input_schema": WEATHER_TOOL["function"]["parameters"]}


@pytest.fixture(scope="module", params=["huggingface", "llamacpp"])
def served(request):
    """The API on the default model, on transformers and on llama.cpp."""
    loaded_models = request.getfixturevalue("loaded_models" if request.param == "huggingface" else "llamacpp_models")
    with running_server(add_api(FastAPI(), loaded_models, api_key=API_KEY)) as url:
        yield url, loaded_models.model.model_id


@pytest.fixture(scope="module")
def client(served):
    url, _ = served
    return anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model_id(served):
    return served[1]


def test_a_message_is_the_chat_completion_of_the_same_request_and_counted_alike(served, client, model_id):
    url, _ = served
    message = client.messages.create(model=model_id, max_tokens=24, messages=QUESTION, **GREEDY)
    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0).chat.completions.create(
        model=model_id, max_tokens=24, messages=QUESTION, temperature=0)
    [block] = message.content
    assert (block.type, block.text) == ("text", chat.choices[0].message.content) and block.text
    assert message.id.startswith("msg_") and (message.role, message.model) == ("assistant", model_id)
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    # Anthropic counts the prompt's cached tokens apart from the rest.
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert usage.output_tokens == chat.usage.completion_tokens
    assert client.messages.count_tokens(model=model_id, messages=QUESTION).input_tokens == chat.usage.prompt_tokens
    system = client.messages.count_tokens(model=model_id, messages=QUESTION, system="Answer in French.", tools=[WEATHER])
    assert system.input_tokens > chat.usage.prompt_tokens + 20  # the system prompt and the tool's schema are in it


def test_a_streamed_message_is_told_in_anthropics_events(client, model_id):
    whole = client.messages.create(model=model_id, max_tokens=24, messages=QUESTION, **GREEDY)
    with client.messages.stream(model=model_id, max_tokens=24, messages=QUESTION, **GREEDY) as stream:
        kinds = [event.type for event in stream if event.type not in ("text",)]
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert [block.model_dump(include={"type", "text"}) for block in final.content] == [block.model_dump(include={"type", "text"})
                                                                                      for block in whole.content]
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def test_a_stop_sequence_that_ends_the_reply_is_named(served, client, model_id):
    whole = client.messages.create(model=model_id, max_tokens=24, messages=QUESTION, **GREEDY).content[0].text
    words = whole.split()
    assert len(words) >= 3, whole
    stop = f" {words[2]}"  # the third word, as the model writes it: after a space
    asked = {"model": model_id, "max_tokens": 24, "messages": QUESTION, "stop_sequences": ["never written here", stop], **GREEDY}
    message = client.messages.create(**asked)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert message.content[0].text == whole[:whole.index(stop)]
    with client.messages.stream(**asked) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence, streamed.content[0].text) == ("stop_sequence", stop, message.content[0].text)
    [delta] = [event.delta for event in events if event.type == "message_delta"]
    assert (delta.stop_reason, delta.stop_sequence) == ("stop_sequence", stop)
    # Chat Completions names it too, as vLLM's server does.
    url, _ = served
    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0).chat.completions.create(
        model=model_id, max_tokens=24, messages=QUESTION, temperature=0, stop=[stop])
    assert (chat.choices[0].finish_reason, chat.choices[0].model_extra["stop_reason"]) == ("stop", stop)
    # A stop sequence never written ends nothing.
    unmet = client.messages.create(**{**asked, "stop_sequences": ["never written here"]})
    assert unmet.stop_reason in ("end_turn", "max_tokens") and unmet.stop_sequence is None and unmet.content[0].text == whole


def test_a_tool_round_trip(client, model_id):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]}
    earlier = [question, call, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C and sunny"}]},
               {"role": "assistant", "content": "It is 18 C and sunny in Paris."}] * 2
    asked = client.messages.create(model=model_id, max_tokens=40, messages=[*earlier, question], tools=[WEATHER], **GREEDY)
    assert asked.stop_reason == "tool_use"
    [use] = [block for block in asked.content if block.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"}) and use.id

    with client.messages.stream(model=model_id, max_tokens=40, messages=[*earlier, question], tools=[WEATHER], **GREEDY) as stream:
        streamed = stream.get_final_message()
    assert [(block.name, block.input) for block in streamed.content if block.type == "tool_use"] == [("get_weather", {"city": "Paris"})]
    assert streamed.stop_reason == "tool_use"

    answer = client.messages.create(model=model_id, max_tokens=40, tools=[WEATHER], **GREEDY, messages=[
        *earlier, question, {"role": "assistant", "content": [block.model_dump(include={"type", "id", "name", "input"}) for block in asked.content
                                                              if block.type == "tool_use"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "25 C and cloudy"}]}]}])
    assert answer.stop_reason == "end_turn" and "25 C" in answer.content[0].text, "the tool's result did not reach the model"


def test_a_forced_tool_and_no_tool(client, model_id):
    forced = client.messages.create(model=model_id, max_tokens=40, messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                    tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}, **GREEDY)
    assert forced.stop_reason == "tool_use" and [block.name for block in forced.content if block.type == "tool_use"] == ["get_weather"]
    plain = client.messages.create(model=model_id, max_tokens=24, messages=QUESTION, **GREEDY)
    none = client.messages.create(model=model_id, max_tokens=24, messages=QUESTION, tools=[WEATHER], tool_choice={"type": "none"}, **GREEDY)
    assert none.content[0].text == plain.content[0].text


def test_reasoning_comes_only_in_thinking_blocks(client, model_id):
    """Earlier turns that thought inside <think> make the model do it again (greedy)."""
    question = {"role": "user", "content": "Hi there!"}
    earlier = [question, {"role": "assistant", "content": "<think>The user greets me.</think>Hello! How can I help?"}] * 2
    message = client.messages.create(model=model_id, max_tokens=30, messages=[*earlier, question], **GREEDY)
    assert [(block.type, getattr(block, "thinking", None) or block.text) for block in message.content] == [
        ("thinking", "The user greets me."), ("text", "Hello! How can I help?")]
    with client.messages.stream(model=model_id, max_tokens=30, messages=[*earlier, question], **GREEDY) as stream:
        deltas = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert [block.model_dump(include={"type", "thinking", "text"}) for block in final.content] == [
        block.model_dump(include={"type", "thinking", "text"}) for block in message.content]
    assert "thinking_delta" in deltas and deltas.index("thinking_delta") < deltas.index("text_delta")


def test_a_claude_code_shaped_request_is_answered(served, model_id):
    """System blocks and tools marked for caching, a server tool this server does not run,
    thinking asked for, metadata and beta fields: all taken, the server tool left out and named."""
    url, _ = served
    body = {
        "model": model_id, "max_tokens": 32, "stream": True, "temperature": 0,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello.", "cache_control": {"type": "ephemeral"}}]}],
        "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "user_abc"},
        "context_management": {"edits": []},
    }
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    with httpx.stream("POST", f"{url}/v1/messages", json=body, headers=headers, timeout=300) as response:
        assert response.status_code == 200 and response.headers["x-anychat-skipped-tools"] == "web_search"
        lines = list(response.iter_lines())
    kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds


def test_keys_go_as_x_api_key_or_bearer_and_errors_in_anthropics_shape(served, model_id):
    url, _ = served
    bearer = anthropic.Anthropic(base_url=url, auth_token=API_KEY, max_retries=0)
    assert bearer.messages.create(model=model_id, max_tokens=4, messages=QUESTION).content[0].text
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(model=model_id, max_tokens=4, messages=QUESTION)
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "authentication_error"
    assert "x-api-key" in refused.value.body["error"]["message"]
    # The Chat Completions path keeps OpenAI's shape.
    with pytest.raises(openai.AuthenticationError) as openai_refused:
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    assert openai_refused.value.body["code"] == "invalid_api_key"

    client = anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=QUESTION)
    assert unknown.value.body["error"] == {"type": "not_found_error", "message": unknown.value.body["error"]["message"]}
    assert model_id in unknown.value.body["error"]["message"]
    refusals = {
        "max_tokens": {"model": model_id, "messages": QUESTION},
        "container": {"model": model_id, "max_tokens": 4, "messages": QUESTION, "container": "container_1"},
        "base64": {"model": model_id, "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}]},
    }
    for said, body in refusals.items():
        response = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": API_KEY})
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error", response.text
        assert said in response.json()["error"]["message"]


def test_a_document_block_reaches_the_model_as_a_file_part_does(served, client, model_id):
    url, _ = served
    text = "The gate code of the north depot is 4471."
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}, "title": "depot notes"}
    counted = client.messages.count_tokens(model=model_id, messages=[{"role": "user", "content": [
        document, {"type": "text", "text": "What is the gate code?"}]}]).input_tokens
    file_part = {"type": "file", "file": {"file_data": "data:text/plain;base64," + base64.b64encode(text.encode()).decode(),
                                          "filename": "depot notes.txt"}}
    tokenized = httpx.post(f"{url}/v1/tokenize", headers={"Authorization": f"Bearer {API_KEY}"}, json={
        "model": model_id, "messages": [{"role": "user", "content": [file_part, {"type": "text", "text": "What is the gate code?"}]}]})
    assert counted == tokenized.json()["count"] > 30


def test_the_model_list_in_anthropics_shape(client, model_id):
    [listed] = client.models.list().data
    assert (listed.id, listed.type, listed.display_name) == (model_id, "model", "SmolLM2-135M-Instruct (embedded)")


def test_an_image_block_reaches_a_model_that_reads_images(tiny_vision_model, monkeypatch):
    from media_samples import png_bytes, solid_image

    media_models = LoadedModels()
    media_models.load({"model_name_or_path": str(tiny_vision_model)})
    try:
        engine = media_models.model.engine
        calls, original = [], engine.model.generate
        monkeypatch.setattr(engine.model, "generate", lambda **inputs: calls.append(inputs) or original(**inputs))
        with running_server(add_api(FastAPI(), media_models)) as url:
            client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
            image = base64.b64encode(png_bytes(solid_image((255, 0, 0), (80, 60)))).decode()
            message = client.messages.create(model=media_models.model.model_id, max_tokens=3, **GREEDY, messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is this?"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}}]}])
        [inputs] = calls
        # 80x60 becomes 84x56: 6x4 patches of 14, merged 2x2 into 6 image tokens, after the text.
        assert inputs["image_grid_thw"].tolist() == [[1, 4, 6]]
        assert message.usage.input_tokens + message.usage.cache_read_input_tokens == inputs["input_ids"].shape[1]
        assert message.stop_reason == "max_tokens"
    finally:
        media_models.unload()


def test_json_output_follows_the_schema(client, model_id):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    message = client.messages.create(model=model_id, max_tokens=80, messages=[{"role": "user", "content": "Name a city and its country."}],
                                     output_config={"format": {"type": "json_schema", "schema": schema}}, **GREEDY)
    assert set(json.loads(message.content[0].text)) == {"city", "country"}


def test_a_last_assistant_message_is_continued(served, client, model_id):
    """Anthropic's prefill: the reply goes on from the words the client put in the model's mouth."""
    url, _ = served
    started = [*QUESTION, {"role": "assistant", "content": "The capital of France is"}]
    message = client.messages.create(model=model_id, max_tokens=8, messages=started, **GREEDY)
    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0).chat.completions.create(
        model=model_id, max_tokens=8, messages=started, temperature=0, extra_body={"continue_final_message": True})
    assert message.content[0].text == chat.choices[0].message.content and "Paris" in message.content[0].text
