"""A conversation that outgrows the model's context goes on: compacted (the default), its oldest
turns dropped, or refused as before (``context_policy``, one setting for the page, the API and
the terminal chat).

It starts from the backend's own count of the prompt's tokens. Where the next prompt would take
more than TRIGGER_SHARE of the room beside the reply, the conversation's middle (between its
head, the system prompt and first user message, and its latest turns, which always stay) is
made smaller, cheapest first: old reasoning dropped, old tool results and documents cut to a note
of what they were; then, to bring the prompt to TARGET_SHARE of the room, its oldest turns are
summarized by the chat's model, or by the one the operator chose to write summaries where it is
loaded (compact), or left out with a note saying so (drop_oldest). A cut
falls before a user message only, so a tool call never parts from its result. The summary is a
message of the conversation, marked as one, so that the next turns send it as it is and read
the same start (the prompt cache keeps it): the prompt grows again for several turns before the
next compaction. A caller that sends the whole history again (an API client that did not take
the summary) finds the summary it was given kept here for the same messages (SUMMARIES_KEPT).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .context_settings import ContextPolicy
from .errors import ConfigError
from .generation_args import GenerationArgs
from .request import MEDIA_KINDS, PLACEHOLDERS, ChatRequest

# Shares of the room a prompt has beside its reply: past the first the conversation is made
# smaller, down to the second, so that several turns pass before the next compaction.
TRIGGER_SHARE = 0.8
TARGET_SHARE = 0.6
# A summary's length limit: a share of the context, at most SUMMARY_MOST tokens (small models
# write to the limit, and at 8k tokens a summary of 819 took 70 s here, the user waiting).
SUMMARY_SHARE = 0.1
SUMMARY_MOST = 256
# The room a reply keeps when the conversation is fitted: its max_new_tokens, at most this share
# of the context (a longer reply is cut to what is left, as before).
REPLY_SHARE = 0.25
SUMMARIES_KEPT = 64
SUMMARY_MARK = "summary"
_DOCUMENT = re.compile(r"^--- (?P<name>.+?)(?:, page 1 of \d+)? ---\n.*?\n--- end of (?P=name) ---$", re.DOTALL | re.MULTILINE)
_THINKING = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
# Old tool results longer than this (in characters) become a note.
LONG_TOOL_RESULT = 300


class CompactingModel(Protocol):
    """What compaction asks of the model (ChatModel): its context, its own token counts, and a reply."""

    @property
    def context_length(self) -> int | None: ...

    @property
    def generation_defaults(self) -> GenerationArgs: ...

    def count_tokens(self, text: str) -> int: ...

    def count_prompt_tokens(self, request: ChatRequest) -> int: ...

    @property
    def counts_prompts_exactly(self) -> bool: ...

    @property
    def model_id(self) -> str: ...

    async def achat(self, request: ChatRequest) -> list[Any]: ...


@dataclass(frozen=True)
class Compacting:
    """A compaction has begun: ``replacing`` messages are being summarized (or left out)."""

    policy: ContextPolicy
    replacing: int
    tokens: int


@dataclass(frozen=True)
class Compaction:
    """What a conversation became to fit: ``request``, the one the model answers now, whose
    message at ``at`` (counted in the request's messages) is the summary (or the note of what was
    left out), in place of the ``replaced`` messages that stood there; ``shortened``, how many old
    reasoning blocks, tool results and documents elsewhere were cut to a note; the prompt's tokens
    before and after (``estimated`` where the model's server does not count them); ``written_by``,
    the model that wrote the summary where it is not the chat's own."""

    policy: ContextPolicy
    request: ChatRequest
    at: int
    replaced: int
    summary: str
    shortened: int
    tokens_before: int
    tokens_after: int
    seconds: float = 0.0
    estimated: bool = False
    written_by: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.request.messages

    @property
    def freed(self) -> int:
        return self.tokens_before - self.tokens_after

    def note(self) -> str:
        """What it did, in a line for the user."""
        shortened = f", {self.shortened} old block{'s' if self.shortened != 1 else ''} cut to a note" if self.shortened else ""
        return f"{replaced_note(self.policy, self.replaced, self.written_by)}{shortened}: {freed_note(self.tokens_before, self.tokens_after, self.estimated)}"


def replaced_note(policy: ContextPolicy, replaced: int, written_by: str | None = None) -> str:
    """What became of the earlier messages a compaction replaced, as the page and the terminal say it."""
    what = "Summary of" if policy == "compact" else "Left out:"
    by = f", written by {written_by}" if written_by else ""
    return f"{what} {replaced} earlier message{'s' if replaced != 1 else ''}{by}"


def freed_note(before: int, after: int, estimated: bool = False) -> str:
    about = "about " if estimated else ""
    return f"{about}{before:,} → {after:,} tokens, {before - after:,} freed" + (" (estimated: the server does not count them)" if estimated else "")


class Summaries:
    """The summaries written lately, by the messages they replaced."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, str] = OrderedDict()

    @staticmethod
    def key(messages: list[dict[str, Any]]) -> str:
        return hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, messages: list[dict[str, Any]]) -> str | None:
        key = self.key(messages)
        if key in self._kept:
            self._kept.move_to_end(key)
        return self._kept.get(key)

    def keep(self, messages: list[dict[str, Any]], summary: str) -> None:
        self._kept[self.key(messages)] = summary
        while len(self._kept) > SUMMARIES_KEPT:
            self._kept.popitem(last=False)


def summary_budget(context: int) -> int:
    """The most tokens a summary may take in a context of ``context``."""
    return min(int(context * SUMMARY_SHARE), SUMMARY_MOST)


def summary_message(summary: str, replaced: int, policy: ContextPolicy = "compact") -> dict[str, Any]:
    """The message that stands for ``replaced`` earlier ones, marked as a summary."""
    if policy == "compact":
        content = f"(A summary of the {replaced} earlier messages of this conversation.)\n{summary}"
    else:
        content = f"({replaced} earlier messages of this conversation were left out to fit the model's context.)"
    return {"role": "assistant", "content": content, SUMMARY_MARK: True}


async def fitted(model: CompactingModel, request: ChatRequest, summaries: Summaries,
                 summarizer: Callable[[], CompactingModel | None] = lambda: None) -> AsyncIterator[Compacting | Compaction | ChatRequest]:
    """The request as its policy fits it to the context: a Compacting and a Compaction where it
    was made smaller, then the request to answer (the same one where nothing had to change).
    ``summarizer``: the model that writes summaries in ``model``'s place, where there is one now.
    Counting renders the prompt again and again, so it runs off the event loop."""
    policy = request.context_policy or "refuse"
    context = model.context_length
    if policy == "refuse" or context is None or request.prompt is not None:
        yield request
        return
    started = time.monotonic()
    reply = min(int(request.generation.get("max_new_tokens", model.generation_defaults.max_new_tokens)), int(context * REPLY_SHARE))
    room = context - reply
    # Counted as the engine will count it (its prompt builder keeps the ids for the same text).
    tokens = await asyncio.to_thread(model.count_prompt_tokens, request)
    if tokens <= room * TRIGGER_SHARE:
        yield request
        return
    plan = _Plan(model, request, int(room * TARGET_SHARE))
    if plan.middle_end <= plan.middle_start:
        yield request  # nothing stands between the head and the latest turn: the engine says it is too long
        return
    shortened = await asyncio.to_thread(plan.shorten_old_blocks)
    if await asyncio.to_thread(plan.tokens) <= plan.target:
        compaction = await asyncio.to_thread(plan.finished, policy, tokens, 0, "", shortened, started)
        yield compaction
        yield compaction.request
        return
    cut, reused, estimate = await asyncio.to_thread(plan.cut, policy, summaries)
    if estimate > room or estimate >= tokens:
        yield request  # what stays is too long by itself (a giant message): compacting would not help, the engine says so
        return
    replaced = cut - plan.middle_start
    yield Compacting(policy, replaced, tokens)
    summary = reused or ""
    written_by = None
    if policy == "compact" and reused is None:
        writer = summarizer() or model
        summary = await _summarized(writer, request, plan.messages[plan.middle_start:cut], summary_budget(context), context)
        summaries.keep(request.messages[plan.middle_start:cut], summary)
        written_by = None if writer is model else writer.model_id
    plan.replace(cut, summary_message(summary, replaced, policy))
    compaction = replace(await asyncio.to_thread(plan.finished, policy, tokens, replaced, summary, shortened, started), written_by=written_by)
    yield compaction
    yield compaction.request


class _Plan:
    """The request's messages as they are made smaller: the head (system prompt, first user
    message) and the latest turns kept, the middle between them shortened or replaced."""

    def __init__(self, model: CompactingModel, request: ChatRequest, target: int) -> None:
        self.model, self.request_given, self.target = model, request, target
        self.messages = [dict(message) for message in request.messages]
        users = [i for i, message in enumerate(self.messages) if message["role"] == "user"]
        self.middle_start = users[0] + 1 if users else len(self.messages)
        # The latest turn (the last user message and what follows it) always stays; the turns
        # before it too, as far as the target leaves room (Plan.cut).
        self.middle_end = users[-1] if users else len(self.messages)
        self.kept_media = {kind: list(files) for kind, files in request.media.items()}

    def request(self, messages: list[dict[str, Any]] | None = None) -> ChatRequest:
        media = {kind: files for kind, files in self.kept_media.items() if files}
        return replace(self.request_given, messages=messages or self.messages, media=media)

    def tokens(self, messages: list[dict[str, Any]] | None = None) -> int:
        return self.model.count_prompt_tokens(self.request(messages))

    def shorten_old_blocks(self) -> int:
        """Old reasoning dropped, old tool results and documents cut to a note; how many."""
        shortened = 0
        for message in self.messages[self.middle_start:self.middle_end]:
            content = message["content"]
            if message["role"] == "assistant":
                content = _THINKING.sub("", content)
                shortened += bool(message.pop("reasoning_content", None)) and content == message["content"]
            elif message["role"] == "tool" and len(content) > LONG_TOOL_RESULT:
                content = f"[The result of {message.get('name') or 'a tool'}, {len(content):,} characters, left out to save room.]"
            elif message["role"] == "user":
                content = _DOCUMENT.sub(lambda found: f"[The document {found['name']}, left out to save room.]", content)
            shortened += content != message["content"]
            message["content"] = content
        return shortened

    def cut(self, policy: ContextPolicy, summaries: Summaries) -> tuple[int, str | None, int]:
        """Where the replaced messages end (before a user message, or at the latest turn): the
        fewest that bring the prompt to the target with a summary of the longest size (fewer
        replaced, more tokens: a binary search); a summary kept for exactly those messages, where
        there is one; and the prompt's tokens after, at most."""
        ends = [i for i in range(self.middle_start + 1, self.middle_end + 1) if i == self.middle_end or self.messages[i]["role"] == "user"]
        budget = summary_budget(self.model.context_length or 0) if policy == "compact" else 0

        def reused(end: int) -> str | None:
            return summaries.get(self.request_given.messages[self.middle_start:end]) if policy == "compact" else None

        def after(end: int) -> int:
            kept = reused(end)
            rest = [*self.messages[:self.middle_start], summary_message(kept or "", end - self.middle_start, policy), *self.messages[end:]]
            # A summary not written yet counts as its longest.
            return self.tokens(rest) + (budget if kept is None and policy == "compact" else 0)

        low, high = 0, len(ends) - 1
        while low < high:
            middle = (low + high) // 2
            if after(ends[middle]) <= self.target:
                high = middle
            else:
                low = middle + 1
        return ends[low], reused(ends[low]), after(ends[low])

    def replace(self, end: int, summary: dict[str, Any]) -> None:
        """The messages from the middle's start to ``end`` replaced by ``summary``, and their files let go."""
        gone = self.messages[self.middle_start:end]
        for kind in MEDIA_KINDS:
            before = sum(message["content"].count(PLACEHOLDERS[kind]) for message in self.messages[:self.middle_start])
            count = sum(message["content"].count(PLACEHOLDERS[kind]) for message in gone)
            if count:
                del self.kept_media[kind][before:before + count]
        self.messages[self.middle_start:end] = [summary]
        self.middle_end -= len(gone) - 1

    def finished(self, policy: ContextPolicy, before: int, replaced: int, summary: str, shortened: int, started: float) -> Compaction:
        request = self.request()
        return Compaction(policy, request, self.middle_start, replaced, summary, shortened, before,
                          self.model.count_prompt_tokens(request), time.monotonic() - started, not self.model.counts_prompts_exactly)


async def _summarized(model: CompactingModel, request: ChatRequest, messages: list[dict[str, Any]], budget: int, chats_context: int) -> str:
    """The model's summary of ``messages`` in at most ``budget`` tokens; where they are longer than
    the model can read at once (its context, else the chat's model's ``chats_context``), a part at a
    time, each with the summary of those before."""
    # Each part is read with the instructions (200 tokens, with some to spare), the summary so far
    # and room for the next: at most a budget each.
    room = (model.context_length or chats_context) - 200 - 2 * budget
    summary = ""
    for part in await asyncio.to_thread(_parts, model, [_transcript_line(message) for message in messages], room):
        asked = replace(ChatRequest.build([{"role": "user", "content": _instructions(summary, part, budget)}], user=request.user,
                                          temperature=0, max_new_tokens=budget), background=True)
        [response] = await model.achat(asked)
        summary = response.parts.content.strip() or summary
    if not summary:
        raise ConfigError("The model wrote an empty summary of the earlier conversation; set the chat's context policy to "
                          "drop_oldest, or start a new chat.")
    return summary


def _transcript_line(message: dict[str, Any]) -> str:
    content = message["content"]
    for kind, tag in PLACEHOLDERS.items():
        content = content.replace(tag, f"[an {kind}]" if kind in ("image", "audio") else f"[a {kind}]")
    calls = "".join(f"\n[calls {call['function']['name']}({call['function'].get('arguments', '')})]"
                    for call in message.get("tool_calls") or () if isinstance(call, dict) and "function" in call)
    who = {"user": "User", "assistant": "Assistant", "tool": f"Tool {message.get('name') or ''}".strip(), "system": "System"}[message["role"]]
    return f"{who}: {content}{calls}"


def _parts(model: CompactingModel, lines: list[str], room: int) -> list[str]:
    """The transcript's lines in parts of at most ``room`` tokens (a longer line cut to fit)."""
    parts, current, used = [], [], 0
    for line in lines:
        tokens = model.count_tokens(line)
        if tokens > room:
            line, tokens = line[:max(1, len(line) * room // tokens)], room
        if current and used + tokens > room:
            parts.append("\n\n".join(current))
            current, used = [], 0
        current.append(line)
        used += tokens
    if current:
        parts.append("\n\n".join(current))
    return parts


def _instructions(earlier: str, transcript: str, budget: int) -> str:
    words = max(20, budget * 2 // 3)
    before = f"A summary of what came before it:\n{earlier}\n\n" if earlier else ""
    return (f"{before}Here is part of a conversation between a user and an assistant:\n\n{transcript}\n\n"
            f"Summarize the conversation so far in at most {words} words, for the assistant to go on from: keep the facts, names, "
            "numbers, decisions and open questions. Write only the summary.")
