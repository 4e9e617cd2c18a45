"""Requests that several API tests send (chat messages, a tool, a tiny image as a content part),
and how they read a streamed reply."""

from __future__ import annotations

import base64

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
COUNTING = [{"role": "user", "content": "Write the numbers from 1 to 1000, separated by commas."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e2a1ed5a0000000049454e44ae426082"
)).decode()


def image_part(url: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]}


def stream_text(chunks) -> tuple[dict[int, str], dict[int, str], object]:
    """Content per choice, finish reason per choice, and the usage of a streamed completion."""
    text, finish, usage = {}, {}, None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text[choice.index] = text.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return text, finish, usage
