"""The model's own chat template: which one to use, and rendering messages and tools with it
(``apply_chat_template``). Templates that ignore tools or past tool calls get them as text, in the
Hermes format our reply parser reads, so nothing is silently dropped."""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ChatTemplateError, UnsupportedError
from ..generation_args import GenerationArgs


def template_source(tokenizer: Any, override: str | None) -> str:
    """The Jinja chat template to use, or a clear error when the model has none."""
    if override:
        if os.path.isfile(override):
            with open(override, encoding="utf-8") as f:
                return f.read()
        return override
    source = getattr(tokenizer, "chat_template", None)
    if isinstance(source, dict):
        source = source.get("default")
    if not source:
        raise ChatTemplateError(
            "This model has no chat template, so there is no right way to turn messages into its prompt. "
            "Load an instruct/chat model, or give one with the chat_template setting (a Jinja string or file)."
        )
    return source


def reasoning_variables(template: str, generation: GenerationArgs) -> dict[str, Any]:
    """The template variables that set how much the model reasons, from ``reasoning_effort``: as
    it is where the template reads it (gpt-oss), else its thinking switch ``enable_thinking``
    (Qwen3 and the like); a refusal where the template has neither."""
    effort = generation.reasoning_effort
    if effort is None:
        return {}
    if "reasoning_effort" in template:
        return {"reasoning_effort": effort}
    if "enable_thinking" in template:
        return {"enable_thinking": generation.thinks}
    raise UnsupportedError(
        "reasoning_effort is not supported by this model: its chat template has no thinking switch (it reads neither "
        "enable_thinking nor reasoning_effort), so nothing can tell it how much to reason. Leave reasoning_effort out, or load "
        "a reasoning model whose template has one.",
        setting="reasoning_effort",
    )


TOOLS_SYSTEM_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def render_chat(
    tokenizer: Any,
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
    continue_final_message: bool = False,
) -> str:
    """Render with the model's own template. A template that ignores ``tools`` gets them in the
    system message in the Hermes format (the format our tool-call parser reads), so tools are
    never silently dropped. ``continue_final_message``: the last (assistant) message is left
    open, without its end of turn, for the model to go on with (transformers' own way of doing it)."""
    if "tool_calls" not in template:
        messages = [_tool_calls_as_text(message) for message in messages]
    if tools and "tools" not in template:
        tools_text = TOOLS_SYSTEM_PROMPT.format(tools="\n".join(json.dumps(tool) for tool in tools))
        if messages[0]["role"] == "system":
            messages = [{**messages[0], "content": messages[0]["content"] + "\n\n" + tools_text}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": tools_text}, *messages]
        tools = None
    try:
        return tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, add_generation_prompt=not continue_final_message,
            continue_final_message=continue_final_message, tokenize=False, **template_kwargs
        )
    except Exception as error:
        if continue_final_message and "continue_final_message" in str(error):
            raise ChatTemplateError(
                "This model's chat template changes the last assistant message as it renders it (it drops or rewrites part "
                "of it), so the reply cannot be continued from where it ended. Ask for a new reply instead."
            ) from error  # Jinja raises its own types, and templates raise_exception() freely
        raise ChatTemplateError(f"The model's chat template rejected these messages: {error}") from error


def _tool_calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """A past assistant turn's tool calls, for a template that would drop them: written into its
    text in the Hermes format the fallback tools prompt asks for."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    blocks = []
    for call in calls:
        function = call.get("function", call)
        blocks.append("<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": function.get("arguments")}) + "\n</tool_call>")
    text = "\n".join(filter(None, [message.get("content") or "", *blocks]))
    return {key: value for key, value in message.items() if key != "tool_calls"} | {"content": text}
