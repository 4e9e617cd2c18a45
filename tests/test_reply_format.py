"""Reply formats without a model: what the door refuses and why, the schema a forced tool call
becomes, and llama.cpp's integer bounds, which we write ourselves (checked against every integer
in a wide window, through a regular expression that reads GBNF's subset used there)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engines import ChatRequest, ConfigError
from engines.reply_format import ReplyFormat, ReplyFormatChoice
from tests.api_samples import WEATHER_TOOL

QUESTION = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "object", "properties": {"age": {"type": "integr"}}}, "schema.properties.age.type is not valid JSON Schema"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "schema uses the keyword 'uniqueItems'"),
    ({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}, "schema.properties.n uses the keyword 'multipleOf'"),
    ({"type": "object", "properties": {"tags": {"type": "array", "maxItems": 5000}}}, "schema.properties.tags.maxItems is 5,000"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(65)}}, "schema.properties has 65 properties"),
    ({"type": "string", "format": "email"}, "schema.format 'email' is not supported"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "both a pattern and a length"),
    # 107 bytes that took the server up by 800 MiB before the grammar's own size was checked.
    ({"type": "string", "pattern": "^a{300000000}$"}, "schema.pattern writes out more than 5,000 pieces"),
    ({"type": "string", "pattern": "^a{,300000000}$"}, "schema.pattern writes out more than 5,000 pieces"),
    ({"type": "object", "properties": {"id": {"type": "string", "pattern": "^(a{100}){100}$"}}}, "schema.properties.id.pattern writes out more"),
    ({"type": "string", "pattern": "^a{" + "9" * 5000 + "}$"}, "schema holds a number thousands of digits long"),
    # Each pattern within the bound, a hundred of them: xgrammar took minutes over such a schema.
    ({"anyOf": [{"type": "string", "pattern": f"^a{{{4990 - i}}}$"} for i in range(100)]}, "schema's patterns together write out more than 5,000"),
    ({"allOf": [{"type": "string"}, {"enum": ["a"]}]}, "allOf has 2 parts"),
    ({"type": "object", "properties": {"x": {"type": "string", "description": "x" * 40_000}}}, "characters long"),
    ("object", "must be a JSON Schema object"),
])
def test_the_door_refuses_schemas_naming_the_part(schema, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ChatRequest.build(QUESTION, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})


@pytest.mark.parametrize("pattern", [r"^[a-z]{1,1000}$", r"^(\d{3}-){100}$", r"^\d{4}-\d{2}-\d{2}$", r"^[\]a]{3,}[b-c]{2}$"])
def test_patterns_with_bounded_repetitions_pass_the_door(pattern):
    ReplyFormat.json_schema({"type": "string", "pattern": pattern})


def test_deep_nesting_is_refused():
    schema: dict = {"type": "string"}
    for _ in range(20):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(ConfigError, match="nested 17 levels deep"):
        ReplyFormat.json_schema(schema)


@pytest.mark.parametrize(("choice", "parallel", "shape"), [
    ("required", None, "array"), ("required", False, "object"), ({"type": "function", "function": {"name": "get_weather"}}, None, "object"),
])
def test_a_forced_tool_call_is_a_schema_of_calls(choice, parallel, shape):
    request = ChatRequest.build(QUESTION, tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=parallel)
    schema = request.reply_format.schema
    assert schema["type"] == shape
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    jsonschema.validate([call] if shape == "array" else call, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "get_weather", "arguments": {"town": 1}} if shape == "object" else [], schema)


def test_tool_choice_and_response_format_refusals():
    with pytest.raises(ConfigError, match="'get_time', which is not among the tools \\(offered: get_weather\\)"):
        ChatRequest.build(QUESTION, tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_time"}})
    with pytest.raises(ConfigError, match="give one of them"):
        ChatRequest.build(QUESTION, tools=[WEATHER_TOOL], tool_choice="required", response_format={"type": "json_object"})
    with pytest.raises(ConfigError, match="response_format must be"):
        ChatRequest.build(QUESTION, response_format={"type": "xml"})
    assert ChatRequest.build(QUESTION, response_format={"type": "text"}, tools=[WEATHER_TOOL], tool_choice="auto").reply_format is None


def test_the_pages_choice_becomes_a_reply_format():
    assert ReplyFormatChoice().chosen() is None
    assert ReplyFormatChoice(reply_format="json_object").chosen() == ReplyFormat.json_object()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    assert ReplyFormatChoice(reply_format="json_schema", reply_schema=json.dumps(schema)).chosen().schema == schema
    with pytest.raises(ConfigError, match="not valid JSON"):
        ReplyFormatChoice(reply_format="json_schema", reply_schema="{").chosen()
    # Named as the page names it, not by the API's field.
    with pytest.raises(ConfigError, match=r"^schema\.properties\.city uses the keyword 'uniqueItems'"):
        ReplyFormatChoice(reply_format="json_schema", reply_schema=json.dumps({**schema, "properties": {"city": {"uniqueItems": True}}})).chosen()


def _as_regex(gbnf: str) -> re.Pattern:
    """The subset integer_range writes (literals, classes, groups, ?, {n}, {n,}) as a regex."""
    pattern = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf)
    return re.compile(pattern.replace(" | ", "|").replace(" ", ""))


@pytest.mark.parametrize(("low", "high"), [(None, None), (0, 150), (-5, 5), (-120, -3), (7, None), (None, 42), (None, -17), (10, 10),
                                           (0, 0), (99, 1000), (123, 98765), (-1000, None), (1, 9)])
def test_integer_bounds_accept_exactly_their_range(low, high):
    pytest.importorskip("llama_cpp")
    from engines.backends.llamacpp_grammar import integer_range

    pattern = _as_regex(integer_range(low, high))
    for number in [*range(-1500, 1500), 98765, 98766, 123456, -123456]:
        inside = (low is None or number >= low) and (high is None or number <= high)
        assert bool(pattern.fullmatch(str(number))) == inside, number
    for not_json in ("01", "-0", "00", "+1", "1.0"):
        assert not pattern.fullmatch(not_json)
