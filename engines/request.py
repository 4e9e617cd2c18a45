"""Turn the arguments of chat/stream_chat into one checked request, the same way for every engine."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, MediaError, UnsupportedError
from .generation_args import GenerationArgs
from .prompt.media import PLACEHOLDERS

ROLES = ("system", "user", "assistant", "tool")
# apply_chat_template's own parameters: chat_template_kwargs may not change how we call it.
_TEMPLATE_CALL_ARGUMENTS = {
    "conversation", "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
}


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    generation: GenerationArgs
    media: dict[str, list[Any]] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def build_request(
    defaults: GenerationArgs,
    accepted_media: frozenset[str],
    messages: list[dict[str, Any]],
    system: str | None = None,
    tools: str | list[dict] | None = None,
    images: list | None = None,
    videos: list | None = None,
    audios: list | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    **generation: Any,
) -> ChatRequest:
    """Check everything before any work starts, so a bad request fails with a clear message."""
    generation_args = defaults.replace(**generation)
    checked = _check_messages(messages)
    if system:
        if checked[0]["role"] == "system":
            checked = checked[1:]
        checked = [{"role": "system", "content": system}, *checked]
    media = {kind: list(files) for kind, files in (("image", images), ("video", videos), ("audio", audios)) if files}
    for kind in media:
        if kind not in accepted_media:
            raise MediaError(
                f"This model does not accept {kind}s. Remove the {kind} or load a model that takes {kind}s."
            )
    if media:
        checked = inject_placeholders(checked, media)
    return ChatRequest(
        messages=checked,
        tools=parse_tools(tools),
        generation=generation_args,
        media=media,
        template_kwargs=_template_kwargs(chat_template_kwargs, generation_args.enable_thinking),
    )


def refuse_unsupported_settings(args: GenerationArgs, engine: str, supported: frozenset[str]) -> None:
    """Settings only some engines honour are refused by the others unless left at their default,
    so a setting is never silently dropped."""
    defaults = GenerationArgs()
    for name in sorted(GenerationArgs.OPTIONAL - supported):
        if getattr(args, name) != getattr(defaults, name):
            raise UnsupportedError(
                f"{name} is not supported by the {engine} engine; leave it out or at its default "
                f"({getattr(defaults, name)}), or load the model on a backend that supports it.",
                setting=name,
            )


def check_scores_request(can_generate: bool, batch_input: list[str], kwargs: dict[str, Any]) -> None:
    """The same refusals from every engine's get_scores, before any work starts."""
    if can_generate:
        raise UnsupportedError(
            "This model does not produce scores: it is a generative model. "
            "Load a reward model (a sequence-classification model with one label) to score texts."
        )
    if kwargs:
        raise ConfigError(f"Unknown scoring argument(s): {', '.join(sorted(kwargs))}.")
    if not batch_input or not all(isinstance(text, str) for text in batch_input):
        raise ConfigError("get_scores needs a non-empty list of texts.")


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


def _check_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
    if checked[-1]["role"] not in ("user", "tool"):
        raise ConfigError(
            f"The last message must come from the user (or a tool), not {checked[-1]['role']!r}: "
            "there is nothing for the model to answer."
        )
    return checked


def inject_placeholders(messages: list[dict[str, Any]], media: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Where the user placed no placeholder of a kind, put one per file at the start of the
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
