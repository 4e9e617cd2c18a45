"""The contract every engine passes, whatever its backend.

A backend's test module subclasses ``EngineContract`` and provides a ``model`` fixture
(a ChatModel on that backend serving the embedded SmolLM2, or a stand-in runtime where the
real one cannot run here). Backend-specific powers get their own tests beside it.
"""

from __future__ import annotations

import json
import time

import pytest

from engines import ChatModel, ChatRequest, ConfigError, MediaError, Response, UnsupportedError
from engines.logprobs import TokenLogprobs
from tools import Tool, ToolResult, ToolsRunning, reply_with_tools

QUESTION = [{"role": "user", "content": "Name three colors."}]
LONG_REQUEST = [{"role": "user", "content": "Write a very long story about a dragon, in many chapters."}]


async def _multiplied(arguments: dict) -> str:
    return str(arguments["a"] * arguments["b"])


# A tool whose call is short whatever the model: two bounded whole numbers.
MULTIPLY = Tool("multiply", "Multiply two whole numbers.", {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999}, "b": {"type": "integer", "minimum": 0, "maximum": 999}},
    "required": ["a", "b"], "additionalProperties": False}, _multiplied)


def weights_question(items: int) -> list[dict]:
    """A conversation of about 9 tokens an item, that the model must read whole to answer."""
    return [{"role": "user", "content": " ".join(f"Item {i} weighs {i * 7 % 13} kilograms." for i in range(items)) + " Which item is heaviest?"}]


# About 3,500 tokens: seconds of prefill on this machine.
LONG_PROMPT = weights_question(400)
# Greedy replies to these are compared token for token between backends on the same file.
PARITY_PROMPTS = [
    "Name three colors.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "Give me a tip for learning to cook.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "List two uses of a paperclip.",
    "Why is the sky blue?",
    "Describe a cat to someone who has never seen one.",
]


class EngineContract:
    """Tests that hold for every engine. Subclasses provide the ``model`` fixture."""

    # False for a stand-in runtime, whose words are a function of the prompt rather than a model's.
    writes_model_text = True
    # False for an engine whose server renders the prompt (remote): its text is not known here,
    # and what reaches the model shows in the prompt's length.
    renders_prompts = True
    # False for a server with no way to continue a reply (llama-cpp-python's): it takes the cut
    # reply for a finished turn and answers after it.
    continues_replies = True
    # False for a server that renders the prompt with the model's own template where that leaves
    # tools out (SmolLM2's): its prompt is the same with tools as without. (Local backends add a
    # prompt that lists them.)
    prompt_lists_tools = True

    @pytest.fixture
    def model(self) -> ChatModel:
        raise NotImplementedError("a backend's test class provides the model fixture")

    def prompt_token_count(self, model: ChatModel, messages, **kwargs) -> int:
        prompt = model.render_prompt(messages, **kwargs)
        return len(model.engine.tokenizer(prompt, add_special_tokens=False).input_ids)

    def assert_prompt_length(self, reply: Response, counted: int) -> None:
        """``reply`` says its prompt was ``counted`` tokens long, the runtime's own count."""
        assert reply.prompt_length == counted

    def test_response_fields(self, model):
        [response] = model.chat(QUESTION, temperature=0, max_new_tokens=64)
        assert response.response_text.strip()
        self.assert_prompt_length(response, self.prompt_token_count(model, QUESTION))
        assert 0 < response.response_length <= 64
        assert response.finish_reason in ("stop", "length")

    def test_max_new_tokens_cuts_with_length(self, model):
        [response] = model.chat(LONG_REQUEST, temperature=0, max_new_tokens=5)
        assert response.finish_reason == "length"
        assert response.response_length == 5

    async def test_greedy_same_text_through_all_four_methods(self, model):
        settings = {"temperature": 0, "max_new_tokens": 24}
        [sync_reply] = model.chat(QUESTION, **settings)
        streamed = "".join(model.stream_chat(QUESTION, **settings))
        [async_reply] = await model.achat(QUESTION, **settings)
        async_streamed = "".join([piece async for piece in model.astream_chat(QUESTION, **settings)])
        assert sync_reply.response_text == streamed == async_reply.response_text == async_streamed
        assert sync_reply.response_text

    def test_stream_reports_the_finished_reply(self, model):
        finished = []
        streamed = "".join(model.stream_chat(LONG_REQUEST, temperature=0, max_new_tokens=9, on_finish=finished.append))
        [reply] = model.chat(LONG_REQUEST, temperature=0, max_new_tokens=9)
        assert finished == [reply]
        assert streamed == reply.response_text

    def test_stop_string_ends_reply_and_is_not_in_it(self, model):
        [free] = model.chat(QUESTION, temperature=0, max_new_tokens=24)
        # A stop string taken from the middle of the model's own greedy reply.
        stop = free.response_text.split()[2]
        [stopped] = model.chat(QUESTION, temperature=0, max_new_tokens=24, stop=[stop])
        streamed = "".join(model.stream_chat(QUESTION, temperature=0, max_new_tokens=24, stop=[stop]))
        assert stopped.response_text == free.response_text[: free.response_text.index(stop)]
        assert streamed == stopped.response_text
        assert stopped.finish_reason == "stop"

    def test_num_return_sequences(self, model):
        responses = model.chat(QUESTION, temperature=1.0, max_new_tokens=12, num_return_sequences=3, seed=0)
        assert len(responses) == 3
        assert all(r.response_text and r.response_length > 0 for r in responses)

    def test_system_prompt_reaches_the_prompt(self, model):
        pirate = {"system": "You answer like a pirate."}
        [reply] = model.chat(QUESTION, temperature=0, max_new_tokens=1, **pirate)
        counted = self.prompt_token_count(model, QUESTION, **pirate)
        assert counted != self.prompt_token_count(model, QUESTION)
        self.assert_prompt_length(reply, counted)
        if self.renders_prompts:
            prompt = model.render_prompt(QUESTION, **pirate)
            assert "You answer like a pirate." in prompt
            assert prompt.index("You answer like a pirate.") < prompt.index("Name three colors.")

    def test_tools_reach_the_prompt(self, model):
        tools = '[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]'
        [reply] = model.chat(QUESTION, temperature=0, max_new_tokens=1, tools=tools)
        counted = self.prompt_token_count(model, QUESTION, tools=tools)
        assert (counted != self.prompt_token_count(model, QUESTION)) == self.prompt_lists_tools
        self.assert_prompt_length(reply, counted)
        if self.renders_prompts:
            assert "get_weather" in model.render_prompt(QUESTION, tools=tools)

    def test_continue_final_message_goes_on_with_the_reply(self, model):
        """A reply cut at max_new_tokens, continued: the prompt is the cut reply left open, and the
        model goes on from where it ended, so that (greedy) the two halves are its whole reply."""
        settings = {"temperature": 0, "max_new_tokens": 8}
        [head] = model.chat(LONG_REQUEST, **settings)
        cut = [*LONG_REQUEST, {"role": "assistant", "content": head.response_text}]
        if self.renders_prompts:
            assert model.render_prompt(cut, continue_final_message=True) == model.render_prompt(LONG_REQUEST) + head.response_text
        [tail] = model.chat(cut, continue_final_message=True, **settings)
        assert tail.response_length == 8
        self.assert_prompt_length(tail, self.prompt_token_count(model, cut, continue_final_message=True))
        if self.writes_model_text and self.continues_replies:
            [whole] = model.chat(LONG_REQUEST, temperature=0, max_new_tokens=16)
            assert head.response_text + tail.response_text == whole.response_text
        with pytest.raises(ConfigError, match="must be an assistant reply, not 'user'"):
            model.chat(LONG_REQUEST, continue_final_message=True)

    def test_unknown_generation_argument_is_named(self, model):
        with pytest.raises(ConfigError, match="temprature"):
            model.chat(QUESTION, temprature=0.5)

    def test_media_for_text_only_model_is_refused(self, model):
        if "image" in model.engine.media_kinds:
            pytest.skip("this model takes images")
        with pytest.raises(MediaError, match="does not accept images"):
            model.chat(QUESTION, images=[b"not used"])

    def test_scores_from_generative_model_are_refused(self, model):
        with pytest.raises(UnsupportedError, match="does not produce scores"):
            model.get_scores(["hello"])

    def test_logprobs_or_a_clear_refusal(self, model):
        """Each reply token's logprob and its likeliest alternatives, the same streamed and not,
        where the backend reads them (greedy: the chosen token is the likeliest); elsewhere a
        refusal naming the setting, never a reply without them."""
        settings = {"temperature": 0, "max_new_tokens": 12, "logprobs": 5}
        if "logprobs" not in model.generation_settings:
            with pytest.raises(UnsupportedError, match="logprobs is not supported"):
                model.chat(QUESTION, **settings)
            return
        [reply] = model.chat(QUESTION, **settings)
        assert len(reply.logprobs) == reply.response_length
        assert "".join(token.chosen.token for token in reply.logprobs).startswith(reply.response_text)
        for token in reply.logprobs:
            top = [alternative.logprob for alternative in token.top]
            assert len(top) == 5 and top == sorted(top, reverse=True) and top[0] <= 0
            assert token.chosen.logprob == pytest.approx(top[0], abs=1e-4)
            assert token.chosen.bytes == tuple(token.chosen.token.encode())
        streamed = list(model.stream_reply(QUESTION, **settings))
        assert tuple(item for item in streamed if isinstance(item, TokenLogprobs)) == streamed[-1].logprobs
        assert [token.chosen.token for token in streamed[-1].logprobs] == [token.chosen.token for token in reply.logprobs]
        [plain] = model.chat(QUESTION, temperature=0, max_new_tokens=12)
        assert plain.logprobs is None and plain.response_text == reply.response_text
        with pytest.raises(ConfigError, match="logprobs must be in \\[0, 20\\]"):
            model.chat(QUESTION, logprobs=21)

    async def test_cancelled_stream_stops_generation(self, model):
        stream = model.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=2000)
        pieces = []
        async for piece in stream:
            pieces.append(piece)
            if len(pieces) == 5:
                break
        # Read while the reply is being written, so that the count read after it is seen to move.
        counted = model.engine.unfinished_requests()
        await stream.aclose()
        assert len(pieces) == 5
        assert counted == 1, "the runtime did not count the reply it was writing"
        # Closing the stream returns once the model has stopped (BaseEngine.stream_replies).
        self.assert_no_request_running(model)
        # The engine is free again at once: a short request completes quickly, which it could
        # not do if the 2,000-token generation were still holding the only slot.
        started = time.perf_counter()
        [reply] = await model.achat(QUESTION, temperature=0, max_new_tokens=4)
        assert reply.response_length == 4
        assert time.perf_counter() - started < 30, "the cancelled generation still held the engine"
        self.assert_no_request_running(model)

    async def test_a_called_tool_runs_and_its_result_reaches_the_next_answer(self, model):
        """The agent loop (tools/agent_loop.py) over this backend: a forced call of a tool
        runs, and the next answer's prompt is the conversation with the call and its result, token
        for token. A stand-in runtime writes no call: its one answer passes through."""
        forced = {"tool_choice": {"type": "function", "function": {"name": "multiply"}}} if self.writes_model_text else {}
        question = [{"role": "user", "content": "What is 17 times 23?"}]
        request = ChatRequest.build(question, tools=[MULTIPLY.schema()], temperature=0, max_new_tokens=64, **forced)
        items = [item async for item in reply_with_tools(model, request, {"multiply": MULTIPLY}, step_limit=2)]
        answers = [item for item in items if isinstance(item, Response)]
        if not self.writes_model_text:
            assert len(answers) == 1 and not [item for item in items if isinstance(item, ToolsRunning | ToolResult)]
            return
        [result] = [item for item in items if isinstance(item, ToolResult)]
        arguments = json.loads(result.call.arguments)
        assert answers[0].parts.tool_calls == (result.call,) and result.content == str(arguments["a"] * arguments["b"])
        answer = {"role": "assistant", "content": answers[0].parts.content or "", "tool_calls": [result.call.for_template()]}
        asked = [*question, answer, result.for_template()]
        self.assert_prompt_length(answers[1], self.prompt_token_count(model, asked, tools=[MULTIPLY.schema()]))
        self.assert_no_request_running(model)

    def assert_no_request_running(self, model: ChatModel) -> None:
        """Nothing runs or waits, by the runtime's own count and by the waiting line's."""
        assert model.engine.unfinished_requests() == 0, f"the runtime still runs {model.engine.unfinished_requests()} requests"
        assert (model.line.running, model.line.waiting) == (0, 0)

