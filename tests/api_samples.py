"""Requests that several API tests send: chat messages, a tool, a tiny image as a content part."""

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
