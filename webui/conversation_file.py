"""Conversation files: a conversation exported with its media embedded, so that the file opens on
any machine running the app, and imported back into the page's own upload storage.

An import never reads a path on the server: media come only as data: URLs inside the file, and
are written under a fresh folder of their own.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import mimetypes
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, Field, ValidationError

from engines import ChatError
from limits import Limits, size_text

from .conversation import Turn, media_kind

DATA_URL = re.compile(r"data:(?P<mime>(?:image|video|audio)/[\w.+-]+);base64,(?P<data>[A-Za-z0-9+/=\s]*)", re.S)


class EmbeddedMedia(BaseModel):
    name: str = Field(description="the file's name when it was attached")
    data: str = Field(description="the file itself, as a data: URL (base64)")


class SavedTurn(Turn):
    """A turn as the file holds it: its media embedded rather than named by path."""

    files: list[EmbeddedMedia] = []


class ConversationFile(BaseModel):
    """The exported JSON: what importing it back restores."""

    system_prompt: str = ""
    turns: list[SavedTurn]


# Read and encoded a piece at a time; a multiple of 3 bytes, so that the pieces' base64 join up.
EXPORT_PIECE = 3 * 2**20


def write_conversation(path: str, turns: list[Turn], system_prompt: str, limit: int) -> None:
    """The conversation as a file at ``path``, its media embedded, written as it is built (a
    conversation that names one large file many times is never held whole). It may take at most
    ``limit`` bytes, the most an import takes; beyond that it is a ChatError that says so."""
    try:
        with open(path, "wb") as file:
            out = BoundedFile(file, limit)
            out.write('{"system_prompt": ' + json.dumps(system_prompt or "") + ', "turns": [')
            for index, turn in enumerate(turns):
                fields = turn.model_dump_json(exclude={"files"})
                out.write(("," if index else "") + fields.removesuffix("}") + ', "files": [')
                for number, medium in enumerate(turn.files):
                    out.write(("," if number else "") + '{"name": ' + json.dumps(os.path.basename(medium)) + ', "data": "')
                    embed(medium, out)
                    out.write('"}')
                out.write("]}")
            out.write("]}")
    except OSError as error:
        raise ChatError(f"The file could not be written on the server ({error.strerror}).") from None


class BoundedFile:
    """A file written to that refuses to grow beyond ``limit`` bytes."""

    def __init__(self, file: BinaryIO, limit: int) -> None:
        self.file, self.limit, self.written = file, limit, 0

    def write(self, text: str | bytes) -> None:
        data = text.encode("utf-8") if isinstance(text, str) else text
        self.written += len(data)
        if self.written > self.limit:
            raise ChatError(
                f"With its media the conversation is over {size_text(self.limit)}, the largest conversation file this server "
                "imports (--max-upload-size), so it was not exported. Remove the messages with the largest media (Undo, or edit "
                "an earlier message), or ask the server's operator to raise the limit."
            )
        self.file.write(data)


def embed(path: str, out: BoundedFile) -> None:
    """The file at ``path`` as a data: URL, written a piece at a time."""
    mime = mimetypes.guess_type(path)[0] or f"{media_kind(path)}/octet-stream"
    try:
        media = open(path, "rb")
    except OSError:
        raise ChatError(f"{os.path.basename(path)}, attached to this conversation, is no longer on the server, so it cannot be exported.") from None
    with media:
        out.write(f"data:{mime};base64,")
        while piece := media.read(EXPORT_PIECE):
            out.write(base64.b64encode(piece))


def read_conversation(path: str, limits: Limits, media_root: str) -> tuple[list[Turn], str]:
    """The turns and system prompt of the conversation file at ``path``, its media written under a
    fresh folder in ``media_root``. Anything wrong (too large, not a conversation file, media
    that are not embedded) is a ChatError that says so, and then nothing is written."""
    size = os.path.getsize(path)
    if size > limits.max_upload_size:
        raise ChatError(
            f"The file is {size_text(size)}, over this server's limit of {size_text(limits.max_upload_size)} "
            "for files put on the page (--max-upload-size)."
        )
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ChatError(f"This is not an anychat conversation file: it is not JSON text ({error}).") from None
    except RecursionError:  # a few kilobytes of "[[[[…" exhaust the JSON parser's stack
        raise ChatError("This is not an anychat conversation file: it is nested too deeply to be one.") from None
    _refuse_server_paths(raw)
    try:
        conversation = ConversationFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise ChatError(f"This is not an anychat conversation file: {where}: {first['msg']}.") from None
    media = [[_decode(medium, limits.max_import_media_size) for medium in turn.files] for turn in conversation.turns]
    paths = _write_media(media, media_root)
    turns = [Turn(**turn.model_dump(exclude={"files"}), files=files) for turn, files in zip(conversation.turns, paths)]
    return turns, conversation.system_prompt


def _refuse_server_paths(raw: Any) -> None:
    """Files from before media were embedded name them by their path on the server that exported
    them. Such a path is never opened here, whatever it names."""
    turns = raw.get("turns") if isinstance(raw, dict) else None
    lists = [turn["files"] for turn in turns if isinstance(turn, dict) and isinstance(turn.get("files"), list)] if isinstance(turns, list) else []
    paths = [f for files in lists for f in files if isinstance(f, str)]
    if paths:
        raise ChatError(
            f"This file was exported by an older version of anychat, which saved its media as paths on the server "
            f"({', '.join(os.path.basename(p) for p in paths[:3])}{', …' if len(paths) > 3 else ''}) rather than in the file, "
            "so its media cannot be imported. Remove the \"files\" lists from the JSON to import its text."
        )


def _decode(medium: EmbeddedMedia, limit: int) -> tuple[str, bytes]:
    """The medium's safe file name and its bytes, once checked."""
    match = DATA_URL.fullmatch(medium.data.strip())
    if not match:
        raise ChatError(
            f"{medium.name!r} is not embedded in the file: media must be data: URLs of an image, video or audio "
            "(data:image/png;base64,…). Paths and links are never read."
        )
    size = len(match["data"]) * 3 // 4
    if size > limit:
        raise ChatError(
            f"{medium.name!r} is about {size_text(size)}, over this server's limit of {size_text(limit)} for each "
            "medium in a conversation file (--max-import-media-size)."
        )
    try:
        data = base64.b64decode(match["data"], validate=False)
    except binascii.Error as error:
        raise ChatError(f"{medium.name!r} is not valid base64 ({error}).") from None
    return _safe_name(medium.name, match["mime"]), data


def _safe_name(name: str, mime: str) -> str:
    """Only the last part of the name, in plain characters, ending as its media type does (the
    page tells images, videos and audio apart by their extension)."""
    name = re.sub(r"[^\w.\- ]", "_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip(" .") or "media"
    if media_kind(name) != mime.split("/")[0]:
        name += mimetypes.guess_extension(mime) or f".{mime.split('/')[1]}"
    return name


def _write_media(media: list[list[tuple[str, bytes]]], media_root: str) -> list[list[str]]:
    """Each turn's media written under a fresh folder, each in a numbered folder of its own (two
    media may have the same name); the paths, turn by turn."""
    os.makedirs(media_root, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="anychat-import-", dir=media_root)
    numbers = itertools.count()
    try:
        paths = []
        for turn in media:
            paths.append([])
            for name, data in turn:
                path = Path(folder, str(next(numbers)), name)
                path.parent.mkdir()
                path.write_bytes(data)
                paths[-1].append(str(path))
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise ChatError(f"The media could not be saved on the server ({error.strerror}); the conversation was not imported.") from None
    return paths
