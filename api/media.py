"""OpenAI messages (text and content parts) into the engine's messages and media lists.

Documents (``file`` parts: PDF, Word, text) become text in their message, named by file (and
page), where the part is: every model reads them (engines/prompt/documents.py).

Media come as data: URLs (base64). Local files are read only when the server was started
with a folder that allows them, and only inside that folder. Remote URLs are never fetched:
fetching would let any caller make this server request any address (SSRF).
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines import MediaError
from engines.prompt.document_sandbox import SandboxLimits, read_bounded
from engines.prompt.documents import Document
from engines.request import MEDIA_KINDS, PLACEHOLDERS, MediaKind

from .errors import APIError
from .schemas import AudioURLPart, FilePart, ImagePart, InputAudioPart, Message, TextPart, VideoURLPart

SEND_AS_DATA_URL = "Send the file inline as a data: URL, like data:image/png;base64,<base64 of the file>."


@dataclass(frozen=True)
class SentDocument:
    """A document of a ``file`` part: read, and its text (``text``) in message ``message``."""

    message: int
    document: Document
    text: str


@dataclass
class EngineInput:
    """The messages as the engine reads them (text, with a placeholder where each file goes),
    those files by kind, and the documents whose text the messages hold."""

    messages: list[dict[str, Any]]
    media: dict[MediaKind, list[Any]] = field(default_factory=lambda: {kind: [] for kind in MEDIA_KINDS})
    documents: list[SentDocument] = field(default_factory=list)


def to_engine_input(messages: list[Message], local_media_dir: Path | None, limits: SandboxLimits, user: str | None = None) -> EngineInput:
    """Slow where documents are read: call it off the event loop. ``user``: whose documents they are (read one at a time)."""
    result = EngineInput(messages=[])
    for index, message in enumerate(messages):
        content = _content_text(message.content, result, index, local_media_dir, limits, user)
        converted: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role, "content": content}
        if message.tool_calls:
            converted["tool_calls"] = [_template_tool_call(call, f"messages[{index}].tool_calls[{i}]") for i, call in enumerate(message.tool_calls)]
        if message.tool_call_id is not None:
            converted["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            converted["name"] = message.name
        result.messages.append(converted)
    return result


def _content_text(content: str | list | None, result: EngineInput, message: int, local_media_dir: Path | None,
                  limits: SandboxLimits, user: str | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    param = f"messages[{message}].content"
    text = ""
    previous_was_text = False
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if isinstance(part, TextPart):
            text += ("\n" if previous_was_text else "") + part.text
        elif isinstance(part, FilePart):
            document = _document(part, where, limits, user)
            result.documents.append(SentDocument(message, document, document.for_model()))
            text += ("\n" if previous_was_text else "") + result.documents[-1].text
            previous_was_text = True
            continue
        elif isinstance(part, ImagePart):
            result.media["image"].append(load_url(part.image_url.url, where, local_media_dir))
            text += PLACEHOLDERS["image"]
        elif isinstance(part, VideoURLPart):
            result.media["video"].append(load_url(part.video_url.url, where, local_media_dir))
            text += PLACEHOLDERS["video"]
        elif isinstance(part, AudioURLPart):
            result.media["audio"].append(load_url(part.audio_url.url, where, local_media_dir))
            text += PLACEHOLDERS["audio"]
        elif isinstance(part, InputAudioPart):
            result.media["audio"].append(_base64(part.input_audio.data, where))
            text += PLACEHOLDERS["audio"]
        previous_was_text = isinstance(part, TextPart)
    return text


def _document(part: FilePart, param: str, limits: SandboxLimits, user: str | None) -> Document:
    if part.file.file_data is None:
        reason = "file_id names a file uploaded to OpenAI's Files API, which this server does not have" if part.file.file_id else "it has no file_data"
        raise APIError(400, f"{param}.file: {reason}. Send the file itself in file_data, as a data: URL "
                            "(data:application/pdf;base64,<base64 of the file>), with its filename.", param=f"{param}.file")
    data_url = part.file.file_data.startswith("data:")
    data = _data_url(part.file.file_data, param) if data_url else _base64(part.file.file_data, param)
    mime = part.file.file_data[len("data:"):].partition(";")[0].partition(",")[0] if data_url else ""
    name = os.path.basename(part.file.filename or "") or "document" + (mimetypes.guess_extension(mime) or ".txt")
    try:
        return read_bounded(data, name, limits, user)
    except MediaError as error:
        raise APIError(400, f"{param}: {error}", param=param, code="invalid_document") from None


def _template_tool_call(call, param: str) -> dict[str, Any]:
    """Chat templates expect a past call's arguments as a mapping, not as the JSON text OpenAI sends."""
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as error:
        raise APIError(400, f"{param}.function.arguments is not valid JSON ({error.msg}).", param=param) from None
    return {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}


def load_url(url: str, param: str, local_media_dir: Path | None) -> bytes | str:
    """The bytes of a data: URL, or the path of an allowed local file."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "data":
        return _data_url(url, param)
    if scheme in ("http", "https"):
        raise APIError(400, f"{param}: remote URLs are not fetched by this server. {SEND_AS_DATA_URL}", param=param, code="remote_url_refused")
    if scheme in ("file", ""):
        return _local_file(url, param, local_media_dir)
    raise APIError(400, f"{param}: unsupported URL scheme {scheme!r}. {SEND_AS_DATA_URL}", param=param)


def _data_url(url: str, param: str) -> bytes:
    header, comma, data = url[len("data:"):].partition(",")
    if not comma:
        raise APIError(400, f"{param}: malformed data: URL (no comma before the data). {SEND_AS_DATA_URL}", param=param)
    if header.endswith(";base64"):
        return _base64(data, param)
    return urllib.parse.unquote_to_bytes(data)


def _base64(data: str, param: str) -> bytes:
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(400, f"{param}: the data is not valid base64.", param=param) from None
    if not decoded:
        raise APIError(400, f"{param}: the file is empty.", param=param)
    return decoded


def _local_file(url: str, param: str, local_media_dir: Path | None) -> str:
    if local_media_dir is None:
        raise APIError(
            400,
            f"{param}: local files are not read unless the server is started with --allowed-local-media-path DIR. {SEND_AS_DATA_URL}",
            param=param,
            code="local_file_refused",
        )
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path) if url.lower().startswith("file:") else url
    if "\0" in path:  # no file has one, and the file system refuses it outright
        raise APIError(400, f"{param}: the path holds a NUL byte, so it names no file. {SEND_AS_DATA_URL}", param=param, code="local_file_refused")
    resolved = Path(os.path.realpath(path))
    allowed = Path(os.path.realpath(local_media_dir))
    if not resolved.is_relative_to(allowed):
        raise APIError(400, f"{param}: {path} is outside the folder this server may read ({allowed}).", param=param, code="local_file_refused")
    if not resolved.is_file():
        raise APIError(400, f"{param}: there is no file {path}.", param=param)
    return str(resolved)
