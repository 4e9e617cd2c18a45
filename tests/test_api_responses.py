"""OpenAI's Responses API (/v1/responses), driven by the official `openai` SDK against a real
server on the default model, on transformers and llama.cpp: the same request path as Chat
Completions (the same replies and counts), its output items and stream events, function calls
and their outputs, previous_response_id from the chat store (across a restart of the app too),
reading back and deleting, each user's own, and what Codex sends."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from fastapi import FastAPI

from access import Logins
from api import add_api
from harness.browser import AppProcess
from harness.running_server import running_server
from store import Quota, open_store
from tests.api_samples import QUESTION, WEATHER_TOOL

pytestmark = pytest.mark.slow

USERS = {"ada": "ada-pw-1815", "bob": "bob-pw-9302"}
WEATHER = {"type": "function", **WEATHER_TOOL["function"]}


@pytest.fixture(scope="module", params=["huggingface", "llamacpp"])
def served(request, tmp_path_factory):
    """The API on the default model, on transformers and on llama.cpp, with a chat store and two logins."""
    loaded_models = request.getfixturevalue("loaded_models" if request.param == "huggingface" else "llamacpp_models")
    folder = tmp_path_factory.mktemp("responses")
    store = open_store(f"sqlite:///{folder / 'chats.db'}", data=folder)
    try:
        with running_server(add_api(FastAPI(), loaded_models, logins=Logins(list(USERS.items())), store=store)) as url:
            yield url, loaded_models.model.model_id, store
    finally:
        store.close()


def client_of(served, user="ada") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served[0]}/v1", api_key=f"{user}:{USERS[user]}", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def client(served):
    return client_of(served)


@pytest.fixture(scope="module")
def model_id(served):
    return served[1]


def test_a_response_is_the_chat_completion_of_the_same_request(client, model_id):
    response = client.responses.create(model=model_id, input=QUESTION[0]["content"], temperature=0, max_output_tokens=24)
    chat = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=24)
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.output_text == chat.choices[0].message.content and response.output_text
    assert response.status == ("completed" if chat.choices[0].finish_reason == "stop" else "incomplete")
    assert response.id.startswith("resp_") and response.model == model_id
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (chat.usage.prompt_tokens, chat.usage.completion_tokens)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    # Instructions are the system message; a list of items reads as the same messages.
    instructed = client.responses.create(model=model_id, instructions="Answer in one word.", temperature=0, max_output_tokens=24,
                                         input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION[0]["content"]}]}])
    system = client.chat.completions.create(model=model_id, temperature=0, max_tokens=24,
                                            messages=[{"role": "system", "content": "Answer in one word."}, *QUESTION])
    assert instructed.output_text == system.choices[0].message.content


def test_a_streamed_response_is_told_in_its_events(client, model_id):
    whole = client.responses.create(model=model_id, input=QUESTION[0]["content"], temperature=0, max_output_tokens=24)
    with client.responses.stream(model=model_id, input=QUESTION[0]["content"], temperature=0, max_output_tokens=24) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens and final.status == whole.status


def test_previous_response_id_goes_on_from_a_kept_response(client, model_id, served):
    first = client.responses.create(model=model_id, input="What is the capital of France?", temperature=0, max_output_tokens=24)
    second = client.responses.create(model=model_id, input="And of Germany?", previous_response_id=first.id, temperature=0,
                                     max_output_tokens=24)
    messages = [*QUESTION, {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "And of Germany?"}]
    chat = client.chat.completions.create(model=model_id, messages=messages, temperature=0, max_tokens=24)
    assert second.output_text == chat.choices[0].message.content and second.usage.input_tokens == chat.usage.prompt_tokens
    assert second.previous_response_id == first.id
    assert served[2].chats("login:ada") == [], "kept for the API only: the page shows none unless the operator says so"
    # Read back as returned; another user finds neither it nor a way to go on from it.
    assert client.responses.retrieve(second.id).model_dump() == second.model_dump()
    bob = client_of(served, "bob")
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError) as refused:
        bob.responses.create(model=model_id, input="Go on.", previous_response_id=second.id, max_output_tokens=4)
    assert refused.value.body["code"] == "previous_response_not_found"
    # Deleted, it and what went on from it cannot be gone on from.
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model=model_id, input="Go on.", previous_response_id=second.id, max_output_tokens=4)
    assert f"goes on from {first.id}" in gone.value.body["message"]
    # store: false keeps nothing.
    unkept = client.responses.create(model=model_id, input="Hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


@pytest.fixture(scope="module")
def shown_in_page(llamacpp_models, tmp_path_factory):
    """The API on llama.cpp, its replies shown in the page too (--responses-in-page)."""
    folder = tmp_path_factory.mktemp("responses_in_page")
    store = open_store(f"sqlite:///{folder / 'chats.db'}", data=folder, responses_in_page=True)
    try:
        with running_server(add_api(FastAPI(), llamacpp_models, logins=Logins(list(USERS.items())), store=store)) as url:
            yield url, llamacpp_models.model.model_id, store
    finally:
        store.close()


def test_with_responses_in_page_a_chain_is_a_chat_of_its_login_alone(shown_in_page):
    ada, (_, model_id, store) = client_of(shown_in_page), shown_in_page
    first = ada.responses.create(model=model_id, input="What is the capital of France?", temperature=0, max_output_tokens=6)
    second = ada.responses.create(model=model_id, input="And of Germany?", previous_response_id=first.id, temperature=0,
                                  max_output_tokens=6)
    [chat] = store.chats("login:ada")
    tree = store.tree("login:ada", chat.id)
    assert [(tree.messages[place].data["role"], tree.messages[place].data["content"]) for place in tree.branch()] == [
        ("user", "What is the capital of France?"), ("assistant", first.output_text), ("user", "And of Germany?"),
        ("assistant", second.output_text)]
    assert store.chats("login:bob") == [] and client_of(shown_in_page, "bob").responses.create(
        model=model_id, input="Hi", max_output_tokens=4).status in ("completed", "incomplete")
    assert [listed.id for listed in store.chats("login:ada")] == [chat.id] and len(store.chats("login:bob")) == 1
    # Deleted, a reply leaves the chat; the chat goes with its first.
    ada.responses.delete(second.id)
    assert [message.data["content"] for message in store.tree("login:ada", chat.id).messages] == ["What is the capital of France?",
                                                                                                 first.output_text]
    ada.responses.delete(first.id)
    assert store.chats("login:ada") == []


def test_a_response_the_store_refuses_is_answered_and_said_not_kept(llamacpp_models, tmp_path):
    """At its chat quota, a login's new chain cannot be shown as a chat: the reply is still
    answered, marked not kept, with the store's reason, never a server error."""
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path, quota=Quota(chats=1), responses_in_page=True)
    try:
        with running_server(add_api(FastAPI(), llamacpp_models, logins=Logins(list(USERS.items())), store=store)) as url:
            ada, model_id = client_of((url, None, store)), llamacpp_models.model.model_id
            assert ada.responses.create(model=model_id, input="Hi", max_output_tokens=2).store is True
            refused = ada.responses.create(model=model_id, input="Another chat", max_output_tokens=2)
            assert refused.store is False and refused.output_text is not None
            [warning] = refused.model_extra["warnings"]
            assert warning.startswith("This response was not kept, so previous_response_id cannot name it: ") and "chats" in warning, warning
            with pytest.raises(openai.NotFoundError):
                ada.responses.retrieve(refused.id)
    finally:
        store.close()


def test_a_function_call_and_its_output(client, model_id):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    earlier = [question, {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
               {"type": "function_call_output", "call_id": "call_1", "output": "18 C and sunny"},
               {"role": "assistant", "content": [{"type": "output_text", "text": "It is 18 C and sunny in Paris."}]}] * 2
    asked = client.responses.create(model=model_id, input=[*earlier, question], tools=[WEATHER], temperature=0, max_output_tokens=40)
    [call] = [item for item in asked.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments), asked.status) == ("get_weather", {"city": "Paris"}, "completed")
    assert call.call_id and call.id.startswith("fc_")

    with client.responses.stream(model=model_id, input=[*earlier, question], tools=[WEATHER], temperature=0, max_output_tokens=40) as stream:
        deltas = [event.delta for event in stream if event.type == "response.function_call_arguments.delta"]
        streamed = stream.get_final_response()
    assert [json.loads(item.arguments) for item in streamed.output if item.type == "function_call"] == [{"city": "Paris"}] == [
        json.loads("".join(deltas))]

    answer = client.responses.create(model=model_id, previous_response_id=asked.id, tools=[WEATHER], temperature=0, max_output_tokens=40,
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "25 C and cloudy"}])
    assert "25 C" in answer.output_text, "the function's output did not reach the model"


def test_reasoning_comes_as_a_reasoning_item(client, model_id):
    """Earlier turns that thought inside <think> make the model do it again (greedy)."""
    question = {"role": "user", "content": "Hi there!"}
    earlier = [question, {"role": "assistant", "content": "<think>The user greets me.</think>Hello! How can I help?"}] * 2
    response = client.responses.create(model=model_id, input=[*earlier, question], temperature=0, max_output_tokens=30,
                                       reasoning={"summary": "auto"})
    reasoning, message = response.output
    assert (reasoning.type, reasoning.content[0].text, reasoning.summary[0].text) == ("reasoning", "The user greets me.", "The user greets me.")
    assert response.output_text == "Hello! How can I help?" and response.usage.output_tokens_details.reasoning_tokens > 0
    with client.responses.stream(model=model_id, input=[*earlier, question], temperature=0, max_output_tokens=30) as stream:
        kinds = [event.type for event in stream]
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")


def test_json_output_follows_the_schema(client, model_id):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    response = client.responses.create(model=model_id, input="Name a city and its country.", temperature=0, max_output_tokens=80,
                                       text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}})
    assert set(json.loads(response.output_text)) == {"city", "country"}


def test_a_codex_shaped_request_is_answered(served, model_id):
    """Tool types this server does not run (web search, a custom grammar tool), a namespace of
    MCP tools, reasoning asked of a model without a thinking switch, encrypted reasoning asked
    for, nothing stored: answered, with what was left out said in warnings, never a 400."""
    url, _, _ = served
    body = {
        "model": model_id, "instructions": "You are Codex.", "stream": True, "store": False, "parallel_tool_calls": False,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Read the file notes.txt."}]}],
        "tools": [{"type": "web_search"}, {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
                                          "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                  {"type": "namespace", "name": "mcp__files", "description": "Files", "tools": [
                      {"type": "function", "name": "read_file", "description": "Read a file",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}],
        "tool_choice": {"type": "function", "name": "read_file"}, "reasoning": {"effort": "medium", "summary": "auto"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "session-1", "temperature": 0, "max_output_tokens": 40,
    }
    with httpx.stream("POST", f"{url}/v1/responses", json=body, auth=("ada", USERS["ada"]), timeout=300) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line.removeprefix("data: ")) for line in response.iter_lines() if line.startswith("data: ")]
    completed = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    [call] = [item for item in completed["output"] if item["type"] == "function_call"]
    assert (call["name"], call["namespace"], json.loads(call["arguments"])) == ("read_file", "mcp__files", {"path": "notes.txt"})
    warnings = completed["warnings"]
    assert any("'web_search'" in line for line in warnings) and any("'custom' (apply_patch)" in line for line in warnings)
    assert any("reasoning.effort 'medium' is ignored" in line for line in warnings)


def test_a_response_is_gone_on_from_after_a_restart_of_the_app(tmp_path):
    flags = ("api", "--api-key", "key-1")
    app = AppProcess(tmp_path, flags)
    try:
        client = openai.OpenAI(base_url=f"{app.url}v1", api_key="key-1", max_retries=0, timeout=300)
        model_id = client.models.list().data[0].id
        first = client.responses.create(model=model_id, input="My name is Ada. Say hello.", temperature=0, max_output_tokens=16)
    finally:
        app.stop()
    app = AppProcess(tmp_path, flags)
    try:
        client = openai.OpenAI(base_url=f"{app.url}v1", api_key="key-1", max_retries=0, timeout=300)
        assert client.responses.retrieve(first.id).output_text == first.output_text
        second = client.responses.create(model=model_id, input="What is my name?", previous_response_id=first.id, temperature=0,
                                         max_output_tokens=16)
        assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    finally:
        app.stop()
