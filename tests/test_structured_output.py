"""Replies held to a JSON format (issue 22).

- The real clients against the app of `python app.py api` on the default model (llama.cpp),
  served in the test process (harness/app_in_process.py): the `openai` SDK's ``parse`` with a
  pydantic model, ``response_format`` json_object and json_schema (also streamed), forced tool
  calls (``tool_choice`` "required" and a named function, with ``parallel_tool_calls`` false),
  and LangChain's ``with_structured_output`` both ways.
- Validity: the reply to each of 22 schemas (harness/reply_schemas.py) parses and validates, on
  llama.cpp and transformers, greedy and sampled by turns.
- Bad schemas and tool choices: a 400 naming what is wrong, in well under a second, while the
  model is busy with another reply (so the refusal took no place in its line).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from engines import ChatModel, ConfigError
from harness.app_in_process import AppInProcess
from harness.reply_schemas import FRACTION_BOUNDS, SCHEMAS, question
from tests.api_samples import WEATHER_TOOL

pytestmark = pytest.mark.server

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}}, "required": ["zone"]},
    },
}
TOOLS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in (WEATHER_TOOL, TIME_TOOL)}
SAMPLED = {"temperature": 1.0, "seed": 7}
REPLY_TOKENS = 160


class City(BaseModel):
    name: str = Field(max_length=30)
    country: str = Field(max_length=30)
    population: int = Field(ge=0, le=40_000_000)


def assert_valid(text: str, schema: dict) -> dict:
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


# ---- the real clients against the app of `python app.py api`


@pytest.fixture(scope="module")
def api_url(tmp_path_factory):
    app = AppInProcess(tmp_path_factory.mktemp("api"), ("api",))
    try:
        yield app.url
    finally:
        app.stop()


@pytest.fixture(scope="module")
def client(api_url):
    return openai.OpenAI(base_url=f"{api_url}v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def test_openai_parse_gives_the_pydantic_model(client, model_id):
    completion = client.chat.completions.parse(
        model=model_id, messages=[{"role": "user", "content": "Describe Paris."}], response_format=City, temperature=0, max_tokens=REPLY_TOKENS,
    )
    city = completion.choices[0].message.parsed
    assert isinstance(city, City) and city.name
    assert completion.choices[0].finish_reason == "stop"


def test_json_object_is_an_object(client, model_id):
    completion = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Give the capital of France as a JSON object."}], response_format={"type": "json_object"},
        temperature=0, max_tokens=REPLY_TOKENS,
    )
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_json_schema_reply_follows_the_schema(client, model_id, stream):
    schema = SCHEMAS["list of objects"]
    reply = client.chat.completions.create(
        model=model_id, messages=question("shopping list"), stream=stream, max_tokens=REPLY_TOKENS, **SAMPLED,
        response_format={"type": "json_schema", "json_schema": {"name": "shopping", "schema": schema, "strict": True}},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in reply if chunk.choices) if stream else reply.choices[0].message.content
    assert_valid(text, schema)


def test_required_tool_choice_gives_a_valid_call(client, model_id):
    completion = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Hello, how are you?"}], tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required", temperature=0, max_tokens=REPLY_TOKENS,
    )
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert_valid(call.function.arguments, TOOLS[call.function.name])


def test_named_tool_choice_calls_that_function_once(client, model_id):
    completion = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False, max_tokens=REPLY_TOKENS, **SAMPLED,
    )
    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    assert_valid(call.function.arguments, TOOLS["get_time"])


def test_required_tool_choice_streams_the_call(client, model_id):
    chunks = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Weather in Rome?"}], tools=[WEATHER_TOOL], tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=REPLY_TOKENS, stream=True,
    )
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    [call] = calls
    assert call.function.name == "get_weather"
    assert_valid(call.function.arguments, TOOLS["get_weather"])


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(api_url, model_id, method):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=f"{api_url}v1", api_key="unused", model=model_id, temperature=0, max_tokens=REPLY_TOKENS, max_retries=0)
    city = llm.with_structured_output(City, method=method).invoke("Describe Paris.")
    assert isinstance(city, City) and city.name


# ---- bad schemas and tool choices: refused at the door, fast, without the model

TOO_MANY_OPTIONAL = {"type": "object", "properties": {f"field{i}": {"type": "string"} for i in range(300)}}
BAD = [
    ("an invalid schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"age": {"type": "integr"}}}}}}, "schema.properties.age.type is not valid JSON Schema"),
    ("an unsupported keyword", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True}}}}}}, "schema.properties.ids uses the keyword 'uniqueItems'"),
    ("a repetition that explodes", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "array", "items": {"type": "string"}, "maxItems": 10**9}}}}, "maxItems is 1,000,000,000"),
    ("optional properties that explode", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": TOO_MANY_OPTIONAL}}},
     "has 300 properties"),
    ("bounds llama.cpp cannot write", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": FRACTION_BOUNDS["probability"]}}},
     "schema.properties.p: The schema bounds a number that may have a fraction"),
    ("a named tool not in tools", {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "'get_time', which is not among the tools"),
    ("tool parameters that are no schema", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "list"}}}],
                                            "tool_choice": "required"}, "tools[0].function.parameters.type is not valid JSON Schema"),
]


def test_bad_schemas_are_refused_fast_while_the_model_is_busy(api_url, model_id):
    import httpx

    busy = threading.Event()
    done = threading.Event()

    def long_reply() -> None:
        body = {"model": model_id, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 400, "stream": True}
        with httpx.stream("POST", f"{api_url}v1/chat/completions", json=body, timeout=300) as response:
            for _ in response.iter_lines():
                busy.set()
                if done.is_set():
                    break

    writer = threading.Thread(target=long_reply)
    writer.start()
    try:
        assert busy.wait(120), "the long reply did not start"
        for kind, fields, message in BAD:
            started = time.perf_counter()
            response = httpx.post(f"{api_url}v1/chat/completions", timeout=60,
                                  json={"model": model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, **fields})
            elapsed = time.perf_counter() - started
            assert response.status_code == 400, (kind, response.text)
            assert message in response.json()["error"]["message"], (kind, response.text)
            # The model is writing the long reply meanwhile: a request in its line would wait for it.
            assert elapsed < 1.0, f"{kind}: refused after {elapsed:.2f} s"
        assert not done.is_set()
    finally:
        done.set()
        writer.join(300)


# ---- validity: every reply to every schema, on llama.cpp and transformers, greedy and sampled


@pytest.fixture(scope="module")
def llamacpp_model():
    with ChatModel({"infer_backend": "llamacpp"}) as model:
        yield model


@pytest.fixture(params=["llamacpp", "huggingface"])
def model(request, llamacpp_model):
    return llamacpp_model if request.param == "llamacpp" else request.getfixturevalue("chat_model")


def test_every_reply_to_every_schema_is_valid(model):
    """Each schema once, greedy and sampled by turns: the grammar is the schema's whichever picks
    the tokens, so both ways are met over the schemas without asking every schema twice."""
    assert len(SCHEMAS) >= 20
    schemas = SCHEMAS if model.backend == "llamacpp" else {**SCHEMAS, **FRACTION_BOUNDS}
    for number, (name, schema) in enumerate(schemas.items()):
        response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        sampling = SAMPLED if number % 2 else {"temperature": 0}
        [reply] = model.chat(question(name), response_format=response_format, max_new_tokens=REPLY_TOKENS, **sampling)
        assert reply.finish_reason == "stop", (name, sampling, reply.response_text)
        try:
            assert_valid(reply.response_text, schema)
        except (ValueError, jsonschema.ValidationError) as error:
            raise AssertionError(f"{model.backend}, {name}, {sampling}: {reply.response_text!r}: {error}") from None


async def test_several_sequences_each_keep_their_own_grammar():
    """llama.cpp decodes chats together, one sequence each with its own sampler chain and grammar:
    each reply keeps to its own schema, and is the reply its request gets alone."""
    names = ["person", "colour", "matrix"]
    with ChatModel({"infer_backend": "llamacpp", "max_concurrent": 3}) as model:

        async def reply(name: str) -> str:
            [response] = await model.achat(question(name), max_new_tokens=REPLY_TOKENS, **SAMPLED,
                                           response_format={"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}})
            return response.response_text

        alone = [await reply(name) for name in names]
        together = await asyncio.gather(*(reply(name) for name in names))
    assert together == alone
    for name, text in zip(names, together):
        assert_valid(text, SCHEMAS[name])


def test_a_bad_schema_is_a_config_error_for_python_callers(llamacpp_model):
    with pytest.raises(ConfigError, match=r"schema\.properties\.p: .*whole numbers only"):
        llamacpp_model.chat(question("p"), response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": FRACTION_BOUNDS["probability"]}})
