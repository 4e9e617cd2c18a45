"""A chat written into the store as it happens: the user's message when it is sent, the reply
while it streams (every few seconds) and when it ends, each message a row of its own.

A ChatKeeper belongs to one tab's session of one chat. It remembers each message as it last
wrote it, and a save writes only what changed since: new messages, each after the one before it
in the session (a regenerated reply or an edited message is a new version beside the earlier
one, which stays), changed ones, and the ones discarded (an undone exchange). Rows another tab
added to the same chat are never overwritten. Where the store cannot be written, the conversation goes on
in the page, which says so once, and the next save writes everything still unsaved.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import gradio as gr
from gradio.utils import get_upload_folder
from sqlalchemy.exc import SQLAlchemyError

from store import ChatStore, MessageChanges, MessageTree, OverQuota, StoredMessage, StoreError, store_problem
from store.media import file_hash

from .conversation import Turn, kept_media

logger = logging.getLogger(__name__)

# How often a streaming reply is written: what a killed server loses at most.
SAVE_INTERVAL = 2.0
TITLE_LENGTH = 60


class ChatGone(Exception):
    """The chat a keeper has written was deleted since, elsewhere (another tab, another device)."""


class ChatKeeper:
    """Writes chat ``chat_id`` of ``owner`` into ``store``. What it keeps between saves:

    - ``written``: each message row as this keeper last wrote or read it (a save writes the rows
      whose message differs from it);
    - ``shown``: the last message of the branch the store has as shown;
    - ``discarded``: rows to delete at the next save (an undone exchange, a cleared chat);
    - ``seen``: the chat's ``updated`` stamp when this keeper last looked for what other tabs wrote;
    - ``last_save``: when it last saved (a streaming reply is saved every SAVE_INTERVAL);
    - ``problem``: why the store could not be written, until it can again ("" while it can);
    - ``known``: the media hash of each file path kept with the chat, to put a copy back where
      the page's own was deleted; ``_media``: the same by (path, size, mtime), each file read
      once (None: not kept, over the quota).

    Saves and the sidebar's look for other tabs' writes run on threads of their own (the store
    may be slow): a lock keeps them from interleaving."""

    def __init__(self, store: ChatStore, owner: str, chat_id: str, written: dict[int, dict[str, Any]] | None = None,
                 known: dict[str, str] | None = None, shown: int | None = None) -> None:
        self.store = store
        self.owner = owner
        self.chat_id = chat_id
        self.written = written or {}
        self.shown = shown
        self.seen: float | None = None
        self.discarded: set[int] = set()
        self.last_save = time.monotonic()
        self.problem = ""
        self.known = known or {}
        self._media: dict[tuple[str, int, int], tuple[str, int] | None] = {}
        self._lock = threading.Lock()

    def save(self, turns: list[Turn], system: str = "", tools: str = "") -> None:
        """Write what changed in ``turns`` (``system`` and ``tools`` go with a chat written for the first time)."""
        with self._lock:
            self.last_save = time.monotonic()
            try:
                media = self._kept_media(turns)
                messages = [as_message(turn, media) for turn in turns]
                new = [index for index, turn in enumerate(turns) if turn.row is None]
                changes = MessageChanges(
                    added=[messages[index] for index in new],
                    changed={turn.row: message for turn, message in zip(turns, messages)
                             if turn.row is not None and self.written.get(turn.row) != message},
                    removed=sorted(self.discarded),
                    after=turns[new[0] - 1].row if new and new[0] > 0 else None,
                    shown=turns[-1].row if turns else None,
                )
                if not changes and changes.shown == self.shown:
                    return
                ids = self.store.write(self.owner, self.chat_id, changes, {"title": title_of(turns), "system": system, "tools": tools},
                                       dict(media.values()))
                for index, row in zip(new, ids):
                    turns[index].row = row
                if ids or changes.removed:
                    versions = self.store.versions(self.owner, self.chat_id)
                    for turn in turns:
                        turn.versions = list(versions.get(turn.row, ()))
            except (SQLAlchemyError, StoreError, OSError) as error:
                self.failed(error)
                return
            for row in changes.removed:
                self.written.pop(row, None)
            self.discarded -= set(changes.removed)
            self.written.update({turn.row: message for turn, message in zip(turns, messages)})
            self.shown = turns[-1].row if turns else None
            if self.problem:
                self.problem = ""
                gr.Info("The chat is saved again.")

    def save_tree(self, tree: MessageTree[Turn], system: str = "", tools: str = "") -> None:
        """Write a new chat of every message of ``tree`` (an imported conversation's). Unlike
        ``save``, this raises what the store raises: the caller decides what becomes of a chat
        that could not be written."""
        with self._lock:
            self.last_save = time.monotonic()
            media = self._kept_media(tree.messages)
            messages = tree.map(lambda turn: as_message(turn, media))
            shown = [tree.messages[place] for place in tree.branch()]
            ids = self.store.write_tree(self.owner, self.chat_id, messages, {"title": title_of(shown), "system": system, "tools": tools},
                                        dict(media.values()))
            for turn, row in zip(tree.messages, ids):
                turn.row = row
            versions = self.store.versions(self.owner, self.chat_id)
            for turn in shown:
                turn.versions = list(versions.get(turn.row, ()))
            self.written.update({turn.row: message for turn, message in zip(tree.messages, messages.messages)})
            self.shown = shown[-1].row

    def tree(self, turns: list[Turn], upload_folder: str) -> MessageTree[Turn] | None:
        """Every message of this chat, ``turns`` (the page's, the branch shown) standing for
        their own; the others' media shown from ``upload_folder``. None where ``turns`` are not
        all saved as a branch of the chat (the store could not be written, or another tab took
        some away)."""
        stored = self.store.tree(self.owner, self.chat_id)
        place = {message.id: index for index, message in enumerate(stored.messages)}
        if not turns or not all(turn.row in place for turn in turns):
            return None
        branch = [place[turn.row] for turn in turns]
        if [stored.parents[row] for row in branch] != [None, *branch[:-1]]:
            return None
        on_branch = dict(zip(branch, turns))
        return MessageTree([on_branch.get(index) or kept_media(as_turn(message, self.store, upload_folder, self.known), upload_folder)
                            for index, message in enumerate(stored.messages)], stored.parents, branch[-1])

    def discard(self, rows: Iterable[int | None]) -> None:
        """Delete messages ``rows`` (and what follows them, in every branch) from the store at the next save."""
        self.discarded.update(row for row in rows if row is not None)

    def show_version(self, row: int, upload_folder: str) -> list[Turn]:
        """The turns of the branch through message ``row`` of this chat, which the chat shows
        from now on (a message of another chat is refused: NoSuchMessage)."""
        stored = self.store.show(self.owner, self.chat_id, row)
        self.shown = stored[-1].id
        return self.turns_of(stored, upload_folder)

    def written_elsewhere(self, turns: list[Turn], upload_folder: str) -> list[Turn] | None:
        """The turns of the branch the chat shows in the store, where another tab or device has
        written into the chat since this keeper last looked, and that differs from ``turns``;
        None otherwise, and while ``turns`` hold changes of this tab's still to be saved. ChatGone
        where the chat ``turns`` were saved in is deleted."""
        with self._lock:
            if self.problem or self.discarded or any(turn.row is None for turn in turns):
                return None
            chat = self.store.chat(self.owner, self.chat_id)
            if chat is None and turns:
                raise ChatGone(self.chat_id)
            if chat is None or chat.updated == self.seen:
                return None
            self.seen = chat.updated
            stored = self.store.branch(self.owner, self.chat_id)
            ours = [(turn.row, self.written.get(turn.row), tuple(turn.versions)) for turn in turns]
            if [(message.id, as_loaded(message), message.versions) for message in stored] == ours:
                return None
            return self.turns_of(stored, upload_folder)

    def turns_of(self, stored: list[StoredMessage], upload_folder: str) -> list[Turn]:
        """Stored messages as the session's turns, noted as written, their media shown from ``upload_folder``."""
        self.written.update({message.id: as_loaded(message) for message in stored})
        return [kept_media(as_turn(message, self.store, upload_folder, self.known), upload_folder) for message in stored]

    def _kept_media(self, turns: list[Turn]) -> dict[str, tuple[str, int]]:
        """The hash and size of each file of ``turns`` that is kept with the chat, by path: put
        into the store's media the first time it is seen, unless that would take its owner over
        the quota (then the page says so, and the message names the file by its path only)."""
        kept = {}
        # Only the page's own files: a path elsewhere (in chats a browser held, which its user can edit) is never read.
        root = os.path.realpath(get_upload_folder()) + os.sep
        for path in {path for turn in turns for path in turn.files}:
            try:
                stat = os.stat(path)
            except (OSError, ValueError):  # gone already, or no path at all (a NUL byte)
                continue
            if not os.path.realpath(path).startswith(root):
                continue
            key = (path, stat.st_size, stat.st_mtime_ns)
            if key not in self._media:
                self._media[key] = self._keep(path)
            if self._media[key] is not None:
                kept[path] = self._media[key]
                self.known[path] = self._media[key][0]
        return kept

    def restore_media(self, turns: list[Turn]) -> None:
        """Put back, from the store, the page's copies of kept media that Gradio has deleted
        meanwhile (its files last a day), so that a long-open chat still shows and sends them."""
        for turn in turns:
            for index, path in enumerate(turn.files):
                if path in self.known and not os.path.exists(path):
                    turn.files[index] = self.store.media.shown(self.known[path], os.path.basename(path), get_upload_folder())
                    self.known[turn.files[index]] = self.known[path]

    def _keep(self, path: str) -> tuple[str, int] | None:
        digest, size = file_hash(path)
        if self.store.quota.media is not None:
            owned = self.store.media_of(self.owner)
            try:
                if digest not in owned:
                    self.store.quota.check_media(sum(owned.values()) + size)
            except OverQuota as over:
                gr.Warning(f"{os.path.basename(path)} is not kept with the chat: {over}. Meanwhile it stays in this conversation only "
                           "as long as the server keeps the page's files.")
                return None
        return self.store.media.put(path, digest)

    def failed(self, error: Exception) -> None:
        """Say, once until a save goes through again, that the chat could not be saved, and why."""
        problem = store_problem(error)
        logger.warning("Could not save chat %s: %s", self.chat_id, problem)
        if not self.problem:
            if isinstance(error, OverQuota):
                gr.Warning(f"⚠ This chat is not saved: {problem}. It stays on the page and goes on; it is saved as soon as there "
                           "is room.")
            else:
                gr.Warning(f"⚠ This chat could not be saved ({problem}). It stays on the page and goes on; it is saved again as soon "
                           "as the store can be written. Export it (Conversation file) to keep a copy meanwhile.")
        self.problem = problem


def as_message(turn: Turn, media: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """A turn as the store keeps it: what the page keeps of it, and its ``state``; a file kept
    in the store's ``media`` as its hash and name, others by their path."""
    message = {**turn.model_dump(mode="json", exclude_defaults=True), "role": turn.role, "content": turn.content, "state": state_of(turn)}
    if turn.files:
        message["files"] = [{"sha256": media[path][0], "name": os.path.basename(path)} if path in media else path for path in turn.files]
    return message


def as_loaded(message: StoredMessage) -> dict[str, Any]:
    """A stored message as a tab that opened it would write it back unchanged. A reply still
    being written (by another tab, or cut short by a killed server) shows as stopped, which is no
    change of this tab's: it must not write its copy over the reply the other tab goes on writing."""
    loaded = {**message.data, "state": message.state}
    return {**loaded, "stopped": True, "state": "stopped"} if message.state == "writing" else loaded


def state_of(turn: Turn) -> str:
    if turn.writing:
        return "writing"
    if turn.error:
        return "error"
    if turn.stopped:
        return "stopped"
    return "length" if turn.stats is not None and turn.stats.finish_reason == "length" else "done"


def as_turn(message: StoredMessage, store: ChatStore, upload_folder: str, known: dict[str, str]) -> Turn:
    """A stored message as a turn, its media as copies in the page's ``upload_folder`` (each
    copy's hash noted in ``known``); a reply still marked writing was cut short (a reload, a
    killed server) and shows as stopped there."""
    files = []
    for file in message.data.get("files", []):
        if isinstance(file, dict):
            files.append(store.media.shown(file["sha256"], file["name"], upload_folder))
            known[files[-1]] = file["sha256"]
        else:
            files.append(file)
    turn = Turn.model_validate({**message.data, "files": files})
    turn.row, turn.versions = message.id, list(message.versions)
    turn.stopped = turn.stopped or message.state == "writing"
    return turn


def title_of(turns: list[Turn]) -> str:
    """The first user message's first words, or its first file's name."""
    first = next((turn for turn in turns if turn.role == "user"), None)
    if first is None:
        return "New chat"
    text = " ".join(first.content.split()) or next((os.path.basename(path) for path in first.files), "New chat")
    return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 1].rstrip() + "…"
