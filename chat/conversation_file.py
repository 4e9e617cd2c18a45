"""Conversation files: a conversation exported with its media embedded, so that the file opens on
any machine running the app, and imported back into the page's own upload storage.

``turns`` is the branch the chat shows, which is all an older file holds and all an older app
reads. ``tree``, where the chat has other versions of its messages (regenerated, edited), is
every message in the order written, each naming the one it follows: those of the branch shown
by their place in ``turns`` (so that no medium is in the file twice), the others whole.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, Field, ValidationError, model_validator

from engines import ChatError
from limits import Limits, size_text
from store import MessageTree

from .turns import Turn, media_kind

DATA_URL = re.compile(r"data:(?P<mime>(?:image|video|audio)/[\w.+-]+);base64,(?P<data>[A-Za-z0-9+/=\s]*)", re.S)


class EmbeddedMedia(BaseModel):
    name: str = Field(description="the file's name when it was attached")
    data: str = Field(description="the file itself, as a data: URL (base64)")


class SavedTurn(Turn):
    """A turn as the file holds it: its media embedded rather than named by path."""

    files: list[EmbeddedMedia] = []


class TreeMessage(BaseModel):
    """One message of the tree: ``turn`` (its place in ``turns``) for one of the branch shown,
    else ``message``, the message itself."""

    parent: int | None = Field(None, ge=0, description="the place in tree of the message it follows, an earlier one; null for a first message")
    turn: int | None = Field(None, ge=0, description="its place in turns, for a message of the branch shown")
    message: SavedTurn | None = Field(None, description="the message, for one that is not on the branch shown")

    @model_validator(mode="after")
    def one_of_turn_or_message(self) -> TreeMessage:
        if (self.turn is None) == (self.message is None):
            raise ValueError("a message of the tree has either a turn (its place in turns) or the message itself")
        return self


class ConversationFile(BaseModel):
    """The exported JSON: what importing it back restores."""

    system_prompt: str = ""
    turns: list[SavedTurn] = Field(description="the branch the chat shows, first message first")
    tree: list[TreeMessage] = Field([], description="every message, every version, in the order written (none: only turns)")


@dataclass
class Conversation:
    """What a conversation file restores: every message (only the branch shown, for a file
    with only its turns), and the system prompt."""

    tree: MessageTree[Turn]
    system_prompt: str


# Read and encoded a piece at a time; a multiple of 3 bytes, so that the pieces' base64 join up.
EXPORT_PIECE = 3 * 2**20


def write_conversation(path: str, tree: MessageTree[Turn], system_prompt: str, limit: int) -> None:
    """The conversation ``tree`` as a file at ``path``, its media embedded, written as it is
    built (a conversation that names one large file many times is never held whole): the branch
    shown as ``turns``, and every message as ``tree`` where there are others. It may take at most
    ``limit`` bytes, the most an import takes; beyond that it is a ChatError that says so."""
    turns = tree.shown_messages()
    try:
        with open(path, "wb") as file:
            out = BoundedFile(file, limit)
            out.write('{"system_prompt": ' + json.dumps(system_prompt or "") + ', "turns": [')
            for index, turn in enumerate(turns):
                out.write("," if index else "")
                _write_turn(turn, out)
            out.write("]")
            if len(tree) > len(turns):
                places = {id(turn): index for index, turn in enumerate(turns)}
                out.write(', "tree": [')
                for index, (parent, turn) in enumerate(zip(tree.parents, tree.messages)):
                    out.write(("," if index else "") + '{"parent": ' + json.dumps(parent))
                    if id(turn) in places:
                        out.write(f', "turn": {places[id(turn)]}}}')
                    else:
                        out.write(', "message": ')
                        _write_turn(turn, out)
                        out.write("}")
                out.write("]")
            out.write("}")
    except OSError as error:
        raise ChatError(f"The file could not be written on the server ({error.strerror}).") from None


def _write_turn(turn: Turn, out: BoundedFile) -> None:
    fields = turn.model_dump_json(exclude={"files"})
    out.write(fields.removesuffix("}") + ', "files": [')
    for number, medium in enumerate(turn.files):
        out.write(("," if number else "") + '{"name": ' + json.dumps(os.path.basename(medium)) + ', "data": "')
        embed(medium, out)
        out.write('"}')
    out.write("]}")


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


def read_conversation(path: str, limits: Limits, media_root: str) -> Conversation:
    """The conversation file at ``path``, its media written under a fresh folder in
    ``media_root``. Anything wrong (too large, not a conversation file, media that are not
    embedded, a tree that is not one) is a ChatError that says so, and then nothing is written."""
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
    _check_tree(conversation)
    saved = conversation.turns + [node.message for node in conversation.tree if node.message is not None]
    media = [[_decode(medium, limits.max_import_media_size) for medium in turn.files] for turn in saved]
    paths = _write_media(media, media_root)
    read = [Turn(**turn.model_dump(exclude={"files"}), files=files) for turn, files in zip(saved, paths)]
    turns, others = read[:len(conversation.turns)], iter(read[len(conversation.turns):])
    if not conversation.tree:
        return Conversation(MessageTree.line(turns), conversation.system_prompt)
    messages = [turns[node.turn] if node.turn is not None else next(others) for node in conversation.tree]
    shown = next(place for place, node in enumerate(conversation.tree) if node.turn == len(turns) - 1)
    return Conversation(MessageTree(messages, [node.parent for node in conversation.tree], shown), conversation.system_prompt)


def _check_tree(conversation: ConversationFile) -> None:
    """A tree in which each message follows an earlier one, and ``turns`` are each in it once, as a branch."""
    broken = "This conversation file's message tree is broken, so it was not imported:"
    places: dict[int, int] = {}
    for index, node in enumerate(conversation.tree):
        if node.parent is not None and node.parent >= len(conversation.tree):
            raise ChatError(f"{broken} tree.{index} follows tree.{node.parent}, which is not in the tree.")
        if node.parent == index:
            raise ChatError(f"{broken} tree.{index} follows itself (a loop).")
        if node.parent is not None and node.parent > index:
            raise ChatError(f"{broken} tree.{index} follows tree.{node.parent}, which comes after it: each message must come after "
                            "the one it follows (the tree is out of order, or loops).")
        if node.turn is not None:
            if node.turn >= len(conversation.turns):
                raise ChatError(f"{broken} tree.{index} is turns.{node.turn}, which is not in the file.")
            if node.turn in places:
                raise ChatError(f"{broken} turns.{node.turn} is in the tree twice (tree.{places[node.turn]} and tree.{index}).")
            places[node.turn] = index
    if not conversation.tree:
        return
    if not conversation.turns:
        raise ChatError(f"{broken} it has a tree but no turns (the branch the chat shows).")
    for turn in range(len(conversation.turns)):
        if turn not in places:
            raise ChatError(f"{broken} turns.{turn} is not in the tree.")
        follows = places[turn - 1] if turn else None
        if conversation.tree[places[turn]].parent != follows:
            raise ChatError(f"{broken} the turns are not a branch of the tree: turns.{turn} does not follow "
                            + (f"turns.{turn - 1}." if turn else "nothing (it is not a first message)."))


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
