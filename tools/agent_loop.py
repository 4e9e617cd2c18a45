"""A reply that runs the tools it calls: the model answers, the calls of its answer run (all of one
answer at once), their results go back to it as tool messages in its own chat template, and it
answers again, until it answers without a call or reaches the step limit.

Only calls of the tools handed to the loop run; an answer that calls any other (one the user
declared and answers by hand) ends the loop, as does an answer cut short. A call the approval
asks about waits for the user's say (ANSWER_SECONDS at most), and a call denied or not answered
does not run: the model is told so. A
result is fitted to the model's context before it is sent: cut, with a note that says how much
was left out, where it would not fit (where the model does not say its context, at a fixed length,
tool_limits.py). An answer's calls past ToolLimits.calls_per_answer do not run: each one's result
tells the model so. Closing the reply (Stop, a client gone) cancels the running
tools with it, and a question still waiting for its answer. Python callers over a ChatModel
iterate it with stream_reply_with_tools where they do not await (the terminal chat).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engines.backends.base import Response
from engines.compaction import Compaction
from engines.generation_args import GenerationArgs
from engines.prompt.reply_parser import ToolCall
from engines.request import ChatRequest

from .tool_limits import TOOL_LIMITS, ToolLimits
from .toolbox import Tool, ToolResult, run_call

if TYPE_CHECKING:
    from engines.chat_model import ChatModel

STEP_LIMIT = 10
# How long calls wait for the user's say: a reply left asking holds its model and its tab's turn.
ANSWER_SECONDS = 600
# A result is cut to this many characters before its tokens are counted, whatever the context:
# no token is longer, and a tool that answers with megabytes is not tokenized whole.
CHARACTERS_PER_TOKEN_AT_MOST = 32
# Tokens kept for the next answer where the request's max_new_tokens is more than this share of the context.
REPLY_SHARE = 4


class AnsweringModel(Protocol):
    """What the loop asks of the model: a ChatModel's methods (engines/chat_model.py)."""

    context_length: int | None
    generation_defaults: GenerationArgs

    def astream_reply(self, request: ChatRequest, progress: bool = False) -> AsyncIterator[Any]: ...

    def count_prompt_tokens(self, request: ChatRequest) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def held(self) -> contextlib.AbstractContextManager[None]: ...


@dataclass(frozen=True)
class ToolsRunning:
    """The calls of one answer, about to run; a ToolResult of each follows as it finishes."""

    calls: tuple[ToolCall, ...]


class Approval(Protocol):
    """Whom the loop asks before a call runs: the page's user (chat/approval.py), the terminal's."""

    def asks(self, tool: Tool) -> bool:
        """Whether a call of ``tool`` waits for the user's say."""

    async def decide(self, calls: Sequence[ToolCall]) -> Mapping[str, bool]:
        """Whether each of ``calls`` may run, by call id, once the user has said."""


@dataclass(frozen=True)
class ApprovalAsked:
    """These calls of the answer wait for the user's say (an Approval's decide) before they run."""

    calls: tuple[ToolCall, ...]


DENIED = "The user did not allow this call, so it did not run."
UNANSWERED = "The user did not say whether this call may run, so it did not run."


@dataclass(frozen=True)
class StepLimitReached:
    """The model answered ``steps`` times and still called tools: these last calls do not run."""

    steps: int


async def reply_with_tools(model: AnsweringModel, request: ChatRequest, tools: Mapping[str, Tool], step_limit: int = STEP_LIMIT,
                           progress: bool = False, approval: Approval | None = None,
                           limits: ToolLimits = TOOL_LIMITS) -> AsyncIterator[Any]:
    """The items of each answer as ChatModel.astream_reply gives them (``progress`` as
    there); between two answers, ToolsRunning, ApprovalAsked where ``approval`` asks about some
    of the calls (without one, every call runs), then each call's ToolResult, in the order of the
    calls, as the model reads it; and StepLimitReached where the ``step_limit``-th answer calls
    tools still. The model is held in use (``held``) from the first answer to the last: between
    two answers no request of it is in its line, and it must not count as idle then."""
    with model.held():
        for step in range(1, step_limit + 1):
            response = None
            async with contextlib.aclosing(model.astream_reply(request, progress=progress)) as items:
                async for item in items:
                    response = item if isinstance(item, Response) else response
                    if isinstance(item, Compaction):  # the next answers go on from what the model read
                        request = item.request
                    yield item
            calls = response.parts.tool_calls if response is not None and response.finish_reason == "stop" else ()
            if not calls or any(call.name not in tools for call in calls):
                return
            if step == step_limit:
                yield StepLimitReached(step)
                return
            yield ToolsRunning(calls)
            running = calls[:limits.calls_per_answer]
            allowed = {call.id: True for call in running}
            waiting = tuple(call for call in running if approval is not None and approval.asks(tools[call.name]))
            unanswered = False
            if waiting:
                yield ApprovalAsked(waiting)
                try:
                    allowed.update(await asyncio.wait_for(approval.decide(waiting), ANSWER_SECONDS))
                except TimeoutError:
                    allowed.update((call.id, False) for call in waiting)
                    unanswered = True
            # All of them at once; closing the reply (a cancelled await here) cancels those still running.
            results = await asyncio.gather(*(run_call(tools[call.name], call) if allowed[call.id] else _denied(call, unanswered) for call in running))
            results += [_past_the_limit(call, limits.calls_per_answer) for call in calls[limits.calls_per_answer:]]
            asked = _answered(request, response)
            results = await asyncio.to_thread(fit_results, model, asked, results, limits)
            for result in results:
                yield result
            request = dataclasses.replace(asked, messages=[*asked.messages, *(result.for_template() for result in results)])


def stream_reply_with_tools(model: ChatModel, request: ChatRequest, tools: Mapping[str, Tool], step_limit: int = STEP_LIMIT,
                            progress: bool = False, approval: Approval | None = None, limits: ToolLimits = TOOL_LIMITS) -> Iterator[Any]:
    """The blocking form of reply_with_tools over ``model``, as ChatModel.stream_reply is of
    astream_reply: the loop runs on the model's engine loop (ChatModel.iterate), and leaving it
    early (break, Ctrl-C) stops the model and the running tools."""
    return model.iterate(reply_with_tools(model, request, tools, step_limit, progress, approval, limits))


async def _denied(call: ToolCall, unanswered: bool) -> ToolResult:
    if unanswered:
        return ToolResult(call, UNANSWERED, f"not answered within {ANSWER_SECONDS // 60} minutes")
    return ToolResult(call, DENIED, "denied by the user")


def _past_the_limit(call: ToolCall, limit: int) -> ToolResult:
    why = (f"not run: an answer may call at most {limit} tools, this server's limit (ToolLimits.calls_per_answer); "
           "call the rest in your next answer")
    return ToolResult(call, f"Error: {why}", why)


def _answered(request: ChatRequest, response: Response) -> ChatRequest:
    """``request`` followed by the model's answer and its calls. A forced call (tool_choice) is
    forced in the first answer only: forced again, the loop would never end."""
    answer = {"role": "assistant", "content": response.parts.content or "", "tool_calls": [call.for_template() for call in response.parts.tool_calls]}
    reply_format = None if request.reply_format is not None and request.reply_format.name == "tool_call" else request.reply_format
    return dataclasses.replace(request, messages=[*request.messages, answer], reply_format=reply_format)


def fit_results(model: AnsweringModel, asked: ChatRequest, results: list[ToolResult],
                limits: ToolLimits = TOOL_LIMITS) -> list[ToolResult]:
    """``results`` as the model can read them after ``asked``: each within an equal share of
    the context left once the prompt so far and the next answer's tokens are counted, cut where
    it is longer, with a note of how much was left out. Where the model does not say its context,
    each is cut at ``limits``' fixed length: whole, it would go to the page, the chat store and the
    model's server, however long."""
    context = model.context_length
    if context is None:
        return [_cut_at(result, limits.result_characters_without_context) for result in results]
    empty = dataclasses.replace(asked, messages=[*asked.messages, *(dataclasses.replace(r, content="").for_template() for r in results)])
    prompt = model.count_prompt_tokens(empty)
    reply = min(asked.generation.get("max_new_tokens", model.generation_defaults.max_new_tokens), context // REPLY_SHARE)
    share = max(0, (context - prompt - reply) // len(results))
    return [_cut(model, result, share) for result in results]


def _cut(model: AnsweringModel, result: ToolResult, tokens: int) -> ToolResult:
    text = result.content
    kept = text[:tokens * CHARACTERS_PER_TOKEN_AT_MOST]
    # Shortened by the share of tokens over, until it fits with its note (a few rounds at most).
    while kept:
        note = _cut_note(len(text) - len(kept), len(text)) if len(kept) < len(text) else ""
        counted = model.count_tokens(kept + note)
        if counted <= tokens:
            break
        kept = kept[:int(len(kept) * tokens / counted * 0.95)]
    if len(kept) == len(text):
        return result
    return dataclasses.replace(result, content=kept + _cut_note(len(text) - len(kept), len(text)))


def _cut_at(result: ToolResult, characters: int) -> ToolResult:
    text = result.content
    if len(text) <= characters:
        return result
    return dataclasses.replace(result, content=text[:characters] + (
        f"\n[… cut here: {len(text) - characters:,} of the result's {len(text):,} characters were left out, as the model's context "
        f"length is unknown and a result is kept to its first {characters:,} characters then (ToolLimits.result_characters_without_context)]"))


def _cut_note(left_out: int, whole: int) -> str:
    return (f"\n[… cut here: {left_out:,} of the result's {whole:,} characters were left out, as the whole would not fit the "
            "model's context]")
