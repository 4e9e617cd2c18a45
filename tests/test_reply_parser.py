"""The one reply parser (engines/prompt/reply_parser.py) that the page, the API and the terminal chat read replies with."""

import json

import pytest

from engines.prompt.reply_parser import ReplyParser, ToolCall, parse_reply


# The formats of the common chat templates, as a model would write them.
REPLIES = [
    ("Hello world", None, "Hello world", []),
    ("<think>hmm\nok</think>\n\nThe answer is 4", "hmm\nok", "The answer is 4", []),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', None, None, [("get_weather", {"city": "Paris"})]),
    ('Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
     None, "Let me check.\n", [("a", {"x": 1}), ("b", {})]),
    ('<think>Weather needed.</think><tool_call>{"name": "a", "arguments": {}}</tool_call>', "Weather needed.", None, [("a", {})]),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', None, None, [("get_weather", {"city": "Paris"})]),
    ('<|python_tag|>{"name": "a", "parameters": {"x": 1}}', None, None, [("a", {"x": 1})]),
    ('{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}', None, None, [("a", {"x": 1}), ("b", {})]),
    ('[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}]', None, None, [("a", {"x": 1})]),
    ('[{"name": "a", "arguments": {"x": 1}}]', None, None, [("a", {"x": 1})]),
    ("[a link](http://x) is good", None, "[a link](http://x) is good", []),
    ('<tool_call>{"name": broken', None, '<tool_call>{"name": broken', []),
    ("I use <tool and more", None, "I use <tool and more", []),
]


@pytest.mark.parametrize(("text", "reasoning", "content", "calls"), REPLIES)
def test_replies_split_the_same_whole_and_streamed(text, reasoning, content, calls):
    whole = parse_reply(text, parse_tools=True)
    assert (whole.reasoning, whole.content) == (reasoning, content)
    assert [(call.name, json.loads(call.arguments)) for call in whole.tool_calls] == calls
    parser, pieces = ReplyParser(parse_tools=True), []
    for character in text:  # the worst case of a stream: one character at a time
        pieces += parser.push(character)
    held, streamed_calls = parser.finish()
    pieces += held
    assert "".join(c.text for c in pieces if c.kind == "reasoning") == (reasoning or "")
    assert "".join(c.text for c in pieces if c.kind == "content") == (content or "")
    assert streamed_calls == whole.tool_calls
    if calls:  # the calls' raw text streams as it is written, for display
        assert "".join(c.text for c in pieces if c.kind == "tool_call").strip()


def test_without_tools_json_is_plain_content_and_an_opened_think_is_reasoning():
    assert parse_reply('{"name": "a", "arguments": {}}', parse_tools=False).content == '{"name": "a", "arguments": {}}'
    reply = parse_reply("still thinking</think>Done.", parse_tools=False, in_reasoning=True)
    assert (reply.reasoning, reply.content) == ("still thinking", "Done.")


def test_unparsable_tool_text_comes_back_as_content_at_the_end():
    parser = ReplyParser(parse_tools=True)
    streamed = parser.push('Sure. <tool_call>{"name": broken')
    assert [c.kind for c in streamed] == ["content", "tool_call"]
    held, calls = parser.finish()
    assert calls == () and [(c.kind, c.text) for c in held] == [("content", '<tool_call>{"name": broken')]


def test_parts_received_typed_are_kept_as_they_are_beside_the_text_read():
    """A backend's typed reasoning is never read for markers, the answer after it starts as after
    ``</think>``, and calls it received keep their ids."""
    parser = ReplyParser(parse_tools=True)
    parser.add_reasoning("Is </think> a tag? <tool_call>")
    streamed = parser.push("\n\n<think>not reasoning</think>")
    received = ToolCall(name="get_weather", arguments='{"city": "Oslo"}', id="call_from_server")
    parser.add_call(received)
    held, calls = parser.finish()
    assert "".join(c.text for c in streamed + held) == "<think>not reasoning</think>"
    reply = parser.parts(calls)
    assert (reply.reasoning, reply.content) == ("Is </think> a tag? <tool_call>", "<think>not reasoning</think>")
    assert [call.id for call in reply.tool_calls] == ["call_from_server"]


def test_tool_call_for_a_template_has_its_arguments_as_a_mapping():
    call = ToolCall(name="get_weather", arguments='{"city": "Oslo"}')
    assert call.for_template()["function"] == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert ToolCall(name="f", arguments="not json").for_template()["function"]["arguments"] == "not json"
    assert call == ToolCall(name="get_weather", arguments='{"city": "Oslo"}'), "ids do not make calls differ"
