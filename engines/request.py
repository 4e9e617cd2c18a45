"""One chat request (or text completion), as every door builds it and every layer below takes it, unchanged.

The page, the API, the terminal chat and Python callers each build a ``ChatRequest`` once, with
``ChatRequest.build``; ChatModel, the waiting line, the engine and the prompt builder pass it on
as it is. Building it checks everything that does not depend on the loaded model (the messages,
the tools, the template's variables, each generation setting's range), so a bad request fails at
its door with a clear message; what depends on the model (which media it reads, which settings its
backend honours, its context length) is checked by the engine before any work starts.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .context_settings import ContextPolicy, ContextSettings
from .errors import ConfigError, MediaError
from .generation_args import GenerationArgs
from .reply_format import ReplyFormat

MediaKind = Literal["image", "video", "audio"]
MEDIA_KINDS: tuple[MediaKind, ...] = ("image", "video", "audio")
# Where each file goes in the messages; the prompt builder turns each into what the model's template takes.
PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
ROLES = ("system", "user", "assistant", "tool")
# apply_chat_template's own parameters: chat_template_kwargs may not change how we call it.
_TEMPLATE_CALL_ARGUMENTS = {
    "conversation", "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
}


@dataclass(frozen=True)
class ChatRequest:
    """``messages``: the conversation, the system prompt first where there is one, each file's
    placeholder where it goes. ``media``: the files by kind, in the order of their placeholders
    (paths, bytes, PIL images, frame lists or ``(samples, rate)``). ``generation``: the generation
    settings the caller chose, checked, applied over the loaded model's own defaults.
    ``template_kwargs``: variables for the chat template. ``user``: whom the request counts for in
    the model's waiting line (a login name or a client's address; None for a direct caller).
    ``reply_format``: the JSON the reply must be (None for free text), see engines/reply_format.py.
    ``prompt``: for a text completion (``completion``), the text or token ids the model continues
    as they are, with no messages and no chat template. ``continue_final_message``: the last
    message is an assistant reply to go on with (one stopped, or cut at max_new_tokens): the
    template renders it open, without its end of turn, and the model's reply is what comes next.
    ``context_policy``: what the conversation becomes where it outgrows the context (None: refused,
    as "refuse"; engines/compaction.py). ``background``: work done behind a chat's back (a
    compaction's summary), which gives way to every other request where the backend can pause it
    (BaseEngine.background_sequences)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    media: dict[MediaKind, list[Any]] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    user: str | None = None
    reply_format: ReplyFormat | None = None
    prompt: str | tuple[int, ...] | None = None
    continue_final_message: bool = False
    context_policy: ContextPolicy | None = None
    background: bool = False

    @classmethod
    def build(
        cls,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        images: list | None = None,
        videos: list | None = None,
        audios: list | None = None,
        media: dict[str, list] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        user: str | None = None,
        response_format: dict[str, Any] | ReplyFormat | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        continue_final_message: bool = False,
        context_policy: str | None = None,
        **generation: Any,
    ) -> ChatRequest:
        """The request from a chat call's arguments: ``messages`` (``[{"role": ..., "content":
        str}]``), ``system``, ``tools`` (function schemas, a list or JSON text), ``images``,
        ``videos``, ``audios`` (or all three as ``media``, by kind, as the page and the API
        gather them; the two add up), ``chat_template_kwargs``, the reply's format (OpenAI's
        ``response_format``, ``tool_choice`` and ``parallel_tool_calls``), ``continue_final_message`` (the last message is an assistant reply to
        go on with), ``context_policy`` (engines/compaction.py) and any GenerationArgs setting; or a ConfigError that says what is wrong with them."""
        chosen = GenerationArgs.chosen(**generation)
        checked = _check_messages(messages, continue_final_message)
        if system:
            if checked[0]["role"] == "system":
                checked = checked[1:]
            checked = [{"role": "system", "content": system}, *checked]
        given = dict(zip(MEDIA_KINDS, (images, videos, audios)))
        media = {kind: files for kind in MEDIA_KINDS if (files := [*(media or {}).get(kind, ()), *(given[kind] or ())])}
        if media:
            checked = _placed(checked, media)
        parsed_tools = parse_tools(tools)
        reply_format = _reply_format(response_format, parsed_tools, tool_choice, parallel_tool_calls)
        if continue_final_message and reply_format is not None:
            raise ConfigError(
                "A reply format (response_format, or a tool_choice that forces a call) holds a reply from its first token, but a "
                "continued reply starts in the middle of one: leave the format out to continue, or ask for a new reply instead."
            )
        return cls(
            messages=checked,
            tools=parsed_tools,
            media=media,
            generation=chosen,
            template_kwargs=_template_kwargs(chat_template_kwargs, chosen.get("enable_thinking")),
            user=user,
            reply_format=reply_format,
            continue_final_message=continue_final_message,
            context_policy=ContextSettings.build(context_policy=context_policy).context_policy if context_policy else None,
        )

    @classmethod
    def completion(cls, prompt: str | list[int], user: str | None = None, **generation: Any) -> ChatRequest:
        """A request to continue ``prompt`` as it is: text, which the model's tokenizer reads with
        its own special tokens (a BOS where it adds one), or token ids; no chat template shapes
        it. ``generation``: any GenerationArgs setting."""
        chosen = GenerationArgs.chosen(**generation)
        steering = sorted({"enable_thinking", "reasoning_effort"} & set(chosen))
        if steering:
            raise ConfigError(f"{' and '.join(steering)} would steer a chat template, but a completion's prompt goes to the model "
                              "as it is, with no template: leave it out, or write the prompt as the model should see it.")
        if isinstance(prompt, str):
            if not prompt:
                raise ConfigError("The prompt is empty: give the text for the model to continue.")
            return cls(messages=[], generation=chosen, user=user, prompt=prompt)
        if not isinstance(prompt, list | tuple) or not prompt or not all(isinstance(token, int) and token >= 0 for token in prompt):
            raise ConfigError("A prompt is text, or a non-empty list of token ids (whole numbers of at least 0).")
        return cls(messages=[], generation=chosen, user=user, prompt=tuple(prompt))

    def with_generation(self, **settings: Any) -> ChatRequest:
        """The same request with these generation settings too."""
        return dataclasses.replace(self, generation={**self.generation, **GenerationArgs.chosen(**settings)})


def _reply_format(response_format: Any, tools: list[dict[str, Any]] | None, tool_choice: Any, parallel: bool | None) -> ReplyFormat | None:
    asked = ReplyFormat.from_openai(response_format)
    forced = ReplyFormat.for_tool_call(tools, tool_choice, parallel)
    if asked and forced:
        raise ConfigError("A response_format and a forced tool_choice both set what the reply must be; give one of them.")
    return asked or forced


def _template_kwargs(given: dict[str, Any] | None, enable_thinking: bool | None) -> dict[str, Any]:
    kwargs = dict(given or {})
    if not all(isinstance(name, str) for name in kwargs):
        raise ConfigError("chat_template_kwargs must be an object of names and values.")
    reserved = sorted(set(kwargs) & _TEMPLATE_CALL_ARGUMENTS)
    if reserved:
        raise ConfigError(
            f"chat_template_kwargs cannot set {', '.join(reserved)}: those are how the server calls the template. "
            "Use it for the template's own variables, like {\"enable_thinking\": false}."
        )
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    return kwargs


def _check_messages(messages: list[dict[str, Any]], continuing: bool) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ConfigError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts.")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ConfigError(f"Message {index} must be a dict with 'role' and 'content', got {message!r}.")
        if message["role"] not in ROLES:
            raise ConfigError(f"Message {index} has role {message['role']!r}; roles are {', '.join(ROLES)}.")
        if message["content"] is None:
            message = {**message, "content": ""}
        if not isinstance(message["content"], str):
            raise ConfigError(f"Message {index} content must be text, got {type(message['content']).__name__}.")
        checked.append(dict(message))
    if continuing:
        _check_continued(checked[-1])
    elif checked[-1]["role"] not in ("user", "tool"):
        raise ConfigError(
            f"The last message must come from the user (or a tool), not {checked[-1]['role']!r}: "
            "there is nothing for the model to answer."
        )
    return checked


def _check_continued(last: dict[str, Any]) -> None:
    if last["role"] != "assistant":
        raise ConfigError(
            f"continue_final_message goes on with the last message, which must be an assistant reply, not {last['role']!r}: "
            "end the messages with the reply to continue, or leave continue_final_message out to have the model answer."
        )
    if last.get("tool_calls"):
        raise ConfigError("The last assistant message calls tools, and a tool call cannot be continued: send the tools' "
                          "results as tool messages instead, and leave continue_final_message out.")
    if not last["content"].strip():
        raise ConfigError("The last assistant message has no text to continue: give the start of the reply, or leave "
                          "continue_final_message out to have the model answer.")


def _placed(messages: list[dict[str, Any]], media: dict[MediaKind, list[Any]]) -> list[dict[str, Any]]:
    """Where the caller placed no placeholder of a kind, one per file goes at the start of the
    first user message; where they placed some, the count must match the files."""
    messages = [dict(m) for m in messages]
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    for kind, files in media.items():
        tag = PLACEHOLDERS[kind]
        placed = sum(m["content"].count(tag) for m in messages)
        if placed == 0:
            messages[first_user]["content"] = tag * len(files) + messages[first_user]["content"]
        elif placed != len(files):
            raise MediaError(
                f"The messages hold {placed} {tag} placeholder(s) but {len(files)} {kind} file(s) were given: "
                f"use one {tag} per {kind}, or none to have them placed at the start."
            )
    return messages


def parse_tools(tools: str | list[dict] | None) -> list[dict[str, Any]] | None:
    """Tools arrive as JSON text (the seed contract) or as a list of function schemas."""
    if tools is None or (isinstance(tools, str) and not tools.strip()):
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as error:
            raise ConfigError(f"Tools are not valid JSON ({error.msg} at line {error.lineno} column {error.colno}).") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ConfigError("Tools must be a JSON list of function schemas, like [{\"type\": \"function\", \"function\": {...}}].")
    for tool in tools:
        function = tool.get("function", tool)
        if not isinstance(function, dict) or not function.get("name"):
            raise ConfigError(f"Each tool needs a function with a name; this one has none: {json.dumps(tool)[:200]}")
    return tools or None
