"""A request's media as a remote server takes them: each file an OpenAI content part, where its
placeholder is in the messages, holding the file's own bytes (the server's processor reads and
sizes them, as it does for any client). Images go as ``image_url``, audio as ``input_audio`` (WAV
or MP3, as OpenAI's API takes it; samples given in Python become WAV), video as ``video_url`` (the
name vLLM and SGLang read)."""

from __future__ import annotations

import base64
import io
import os
import re
from typing import Any

from ..errors import MediaError
from ..prompt.media import describe, wav_bytes
from ..request import PLACEHOLDERS, MediaKind

_PLACEHOLDER = re.compile("|".join(re.escape(placeholder) for placeholder in PLACEHOLDERS.values()))
_KIND_OF = {placeholder: kind for kind, placeholder in PLACEHOLDERS.items()}
# The sampling rate of audio given as bare samples, where it comes without one.
SAMPLES_RATE = 16_000


def with_media_parts(messages: list[dict[str, Any]], media: dict[MediaKind, list[Any]]) -> list[dict[str, Any]]:
    """``messages`` with each placeholder replaced by its file's content part, in order."""
    if not media:
        return messages
    files = {kind: iter(enumerate(sources)) for kind, sources in media.items()}
    sent = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str) or not _PLACEHOLDER.search(content):
            sent.append(message)
            continue
        parts: list[dict[str, Any]] = []
        position = 0
        for found in _PLACEHOLDER.finditer(content):
            if found.start() > position:
                parts.append({"type": "text", "text": content[position:found.start()]})
            kind = _KIND_OF[found.group()]
            index, source = next(files[kind])
            parts.append(content_part(kind, source, describe(kind, index, source)))
            position = found.end()
        if position < len(content):
            parts.append({"type": "text", "text": content[position:]})
        sent.append({**message, "content": parts})
    return sent


def content_part(kind: MediaKind, source: Any, name: str) -> dict[str, Any]:
    if kind == "image":
        data = _image_bytes(source, name)
        return {"type": "image_url", "image_url": {"url": _data_url(_image_type(data, name), data)}}
    if kind == "audio":
        data = _audio_bytes(source, name)
        return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": _audio_format(data, name)}}
    data = _file_bytes(source, name, "video")
    kind_of = "video/webm" if data[:4] == b"\x1a\x45\xdf\xa3" else "video/mp4"
    return {"type": "video_url", "video_url": {"url": _data_url(kind_of, data)}}


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def _file_bytes(source: Any, name: str, kind: str) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as file:
                return file.read()
        except OSError as error:
            raise MediaError(f"{name} could not be read: {error.strerror or error}.") from error
    raise MediaError(f"{name}: a remote server is sent a {kind} as a file; give its path or bytes, not decoded frames.")


def _image_bytes(source: Any, name: str) -> bytes:
    if isinstance(source, (bytes, str, os.PathLike)):
        return _file_bytes(source, name, "image")
    if hasattr(source, "save"):  # a PIL image
        buffer = io.BytesIO()
        source.save(buffer, format="PNG")
        return buffer.getvalue()
    raise MediaError(f"{name} is not an image: give a path, bytes or a PIL image.")


def _image_type(data: bytes, name: str) -> str:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return Image.MIME.get(image.format or "", "image/png")
    except (UnidentifiedImageError, OSError) as error:
        raise MediaError(f"{name} cannot be read as an image ({error}). Send a PNG, JPEG, GIF or WebP file.") from error


def _audio_bytes(source: Any, name: str) -> bytes:
    if isinstance(source, dict) and "array" in source:
        return wav_bytes(source["array"], source.get("sampling_rate") or SAMPLES_RATE)
    if isinstance(source, tuple) and len(source) == 2:
        return wav_bytes(source[0], source[1])
    return _file_bytes(source, name, "audio")


def _audio_format(data: bytes, name: str) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    raise MediaError(f"{name} is neither WAV nor MP3, the audio a remote server is sent (OpenAI's input_audio): convert it to one of them.")
