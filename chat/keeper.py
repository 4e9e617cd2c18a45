"""A chat written into the store as it happens: the user's message when it is sent, the reply
while it streams (every few seconds) and when it ends, each message a row of its own.

A ChatKeeper belongs to one tab's session of one chat. It remembers each message as it last
wrote it, and a save writes only what changed since: new messages, each after the one it follows
in the session's tree (a regenerated reply or an edited message is a new version beside the
earlier one, which stays), changed ones, and the ones discarded (an undone exchange). Rows another tab
added to the same chat are never overwritten. Where the store cannot be written, the conversation goes on
in the page, which says so once (through the keeper's ``tell``), and the next save writes everything still unsaved.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from store import Added, ChatStore, MessageChanges, MessageRef, MessageTree, OverQuota, StoredMessage, StoreError, store_problem
from store.media import file_hash

from .notices import Notice, Tell, logged
from .turns import Turn, kept_media

logger = logging.getLogger(__name__)

# How often a streaming reply is written: what a killed server loses at most.
SAVE_INTERVAL = 2.0
TITLE_LENGTH = 60


class ChatGone(Exception):
    """The chat a keeper has written was deleted since, elsewhere (another tab, another device)."""


class ChatKeeper:
    """Writes chat ``chat_id`` of ``owner`` into ``store``: a tab's MessageTree of turns, whose
    messages it alone names by the store's ids. Only files in ``upload_folder`` (the page's own)
    are kept with the chat, and copies are put back there; ``tell`` says what the user must know
    (a save that failed, or went through again; a file not kept). What it keeps between saves:

    - ``rows``: the id of each message of the tab's tree in the store, place by place (None, or
      a place past its end: a message not written yet);
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

    Saves, the messages taken out and the sidebar's look for other tabs' writes run on threads
    of their own (the store may be slow): a lock keeps them from interleaving."""

    def __init__(self, store: ChatStore, owner: str, chat_id: str, *, upload_folder: str, tell: Tell = logged) -> None:
        self.store = store
        self.owner = owner
        self.chat_id = chat_id
        self.upload_folder = upload_folder
        self.tell = tell
        self.rows: list[int | None] = []
        self.written: dict[int, dict[str, Any]] = {}
        self.shown: int | None = None
        self.seen: float | None = None
        self.discarded: set[int] = set()
        self.last_save = time.monotonic()
        self.problem = ""
        self.known: dict[str, str] = {}
        self._media: dict[tuple[str, int, int], tuple[str, int] | None] = {}
        self._lock = threading.Lock()

    def save(self, tree: MessageTree[Turn], system: str = "", tools: str = "") -> None:
        """Write what changed in ``tree`` (``system`` and ``tools`` go with a chat written for the first time)."""
        with self._lock:
            self.last_save = time.monotonic()
            tree = _as_it_is(tree)
            rows = self.rows + [None] * (len(tree) - len(self.rows))
            try:
                media = self._kept_media(tree.messages)
                messages = [as_message(turn, media) for turn in tree.messages]
                new = [place for place, row in enumerate(rows) if row is None]
                added = {place: Added(index) for index, place in enumerate(new)}

                def named(place: int | None) -> MessageRef:
                    return None if place is None else added.get(place, rows[place])

                changes = MessageChanges(
                    added=[messages[place] for place in new],
                    follows=[named(tree.parents[place]) for place in new],
                    changed={row: message for row, message in zip(rows, messages) if row is not None and self.written.get(row) != message},
                    removed=sorted(self.discarded),
                    shown=named(tree.shown),
                )
                if not changes and changes.shown == self.shown:
                    return
                ids = self.store.write(self.owner, self.chat_id, changes, {"title": title_of(tree.shown_messages()), "system": system,
                                                                           "tools": tools}, dict(media.values()))
            except (SQLAlchemyError, StoreError, OSError) as error:
                self.failed(error)
                return
            for place, row in zip(new, ids):
                rows[place] = row
            self.rows = rows
            for row in changes.removed:
                self.written.pop(row, None)
            self.discarded -= set(changes.removed)
            self.written.update(zip(rows, messages))
            self.shown = None if tree.shown is None else rows[tree.shown]
            if self.problem:
                self.problem = ""
                self.tell(Notice("sidebar.saved_again", level="info"))

    def save_tree(self, tree: MessageTree[Turn], system: str = "", tools: str = "") -> None:
        """Write a new chat of every message of ``tree`` (an imported conversation's). Unlike
        ``save``, this raises what the store raises: the caller decides what becomes of a chat
        that could not be written."""
        with self._lock:
            self.last_save = time.monotonic()
            media = self._kept_media(tree.messages)
            messages = tree.map(lambda turn: as_message(turn, media))
            ids = self.store.write_tree(self.owner, self.chat_id, messages, {"title": title_of(tree.shown_messages()), "system": system,
                                                                             "tools": tools}, dict(media.values()))
            self.rows = list(ids)
            self.written.update(zip(ids, messages.messages))
            self.shown = None if tree.shown is None else ids[tree.shown]

    def remove(self, tree: MessageTree[Turn], places: Iterable[int]) -> None:
        """Take messages ``places`` out of ``tree``, with every message after them, in every
        branch; out of the store too at the next save (with what other tabs wrote after them)."""
        with self._lock:
            gone = tree.below(places)
            self.discarded.update(row for row in (self.rows[place] for place in gone if place < len(self.rows)) if row is not None)
            self.rows = [self.rows[place] if place < len(self.rows) else None for place in tree.remove(gone)]

    def took(self, stored: MessageTree[StoredMessage]) -> None:
        """The tab shows ``stored``, the chat as read from the store, from now on."""
        self.rows = [message.id for message in stored.messages]
        self.shown = None if stored.shown is None else self.rows[stored.shown]

    def written_elsewhere(self, tree: MessageTree[Turn], upload_folder: str) -> tuple[MessageTree[StoredMessage], MessageTree[Turn]] | None:
        """The chat as the store has it, and as the tab's turns, where another tab or device has
        written into it since this keeper last looked, and that differs from ``tree``; None
        otherwise, and while ``tree`` holds changes of this tab's still to be saved. ChatGone
        where the chat ``tree`` was saved in is deleted."""
        with self._lock:
            if self.problem or self.discarded or len(self.rows) < len(tree) or None in self.rows:
                return None
            chat = self.store.chat(self.owner, self.chat_id)
            if chat is None and len(tree):
                raise ChatGone(self.chat_id)
            if chat is None or chat.updated == self.seen:
                return None
            self.seen = chat.updated
            stored = self.store.tree(self.owner, self.chat_id)
            ours = (self.rows, tree.parents, tree.shown, [self.written.get(row) for row in self.rows])
            if ([message.id for message in stored.messages], stored.parents, stored.shown, [as_loaded(message) for message in stored.messages]) == ours:
                return None
            return stored, self.turns_of(stored, upload_folder)

    def turns_of(self, stored: MessageTree[StoredMessage], upload_folder: str) -> MessageTree[Turn]:
        """Stored messages as the tab's turns, noted as written, their media shown from ``upload_folder``."""
        self.written.update({message.id: as_loaded(message) for message in stored.messages})
        return stored.map(lambda message: kept_media(as_turn(message, self.store, upload_folder, self.known), upload_folder))

    def _kept_media(self, turns: list[Turn]) -> dict[str, tuple[str, int]]:
        """The hash and size of each file of ``turns`` that is kept with the chat, by path: put
        into the store's media the first time it is seen, unless that would take its owner over
        the quota (then the page says so, and the message names the file by its path only)."""
        kept = {}
        # Only the page's own files: a path elsewhere (in chats a browser held, which its user can edit) is never read.
        root = os.path.realpath(self.upload_folder) + os.sep
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
                    turn.files[index] = self.store.media.shown(self.known[path], os.path.basename(path), self.upload_folder)
                    self.known[turn.files[index]] = self.known[path]

    def _keep(self, path: str) -> tuple[str, int] | None:
        digest, size = file_hash(path)
        if self.store.quota.media is not None:
            owned = self.store.media_of(self.owner)
            try:
                if digest not in owned:
                    self.store.quota.check_media(sum(owned.values()) + size)
            except OverQuota as over:
                self.tell(Notice("sidebar.media_not_kept", {"name": os.path.basename(path), "problem": str(over)}))
                return None
        return self.store.media.put(path, digest)

    def failed(self, error: Exception) -> None:
        """Say, once until a save goes through again, that the chat could not be saved, and why."""
        problem = store_problem(error)
        logger.warning("Could not save chat %s: %s", self.chat_id, problem)
        if not self.problem:
            if isinstance(error, OverQuota):
                self.tell(Notice("sidebar.over_quota", {"problem": problem}))
            else:
                self.tell(Notice("sidebar.save_failed", {"problem": problem}))
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


def _as_it_is(tree: MessageTree[Turn]) -> MessageTree[Turn]:
    """``tree`` as it is now, which the page's event loop may add to while a save reads it
    (never takes from: that waits for the keeper's lock). A message is added before its place's
    parent is, and shown after both."""
    shown = tree.shown
    parents = list(tree.parents)
    return MessageTree(list(tree.messages)[:len(parents)], parents, shown)


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
    turn.stopped = turn.stopped or message.state == "writing"
    return turn


def title_of(turns: list[Turn]) -> str:
    """The first user message's first words, or its first file's name."""
    first = next((turn for turn in turns if turn.role == "user"), None)
    if first is None:
        return "New chat"
    text = " ".join(first.content.split()) or next((os.path.basename(path) for path in first.files), "New chat")
    return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 1].rstrip() + "…"
