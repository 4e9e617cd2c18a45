"""What the page hands its handlers, for tests that drive them without a browser: the message
box's value, the chat's settings and generation controls by name; and reading a handler's stream."""

from __future__ import annotations

CONTROLS = ("temperature", "top_p", "top_k", "max_new_tokens", "repetition_penalty", "seed", "skip_special_tokens", "enable_thinking")


def settings(max_new_tokens=16, temperature=0.0, seed=None, system="", tools="", reply_format="text", reply_schema=""):
    """What the page hands the chat handlers: the chat's system prompt, tools and reply format, and its controls by name."""
    return {
        "system": system, "tools": tools, "reply_format": reply_format, "reply_schema": reply_schema, "temperature": temperature, "top_p": 1.0, "top_k": 50, "max_new_tokens": max_new_tokens,
        "repetition_penalty": 1.0, "seed": seed, "skip_special_tokens": True, "enable_thinking": True,
    }


async def run(updates):
    return [update async for update in updates]


def message(text, files=()):
    return {"text": text, "files": list(files)}


def written_imports(upload_folder):
    return sorted(upload_folder.glob("anychat-import-*/*/*")) if upload_folder.exists() else []
