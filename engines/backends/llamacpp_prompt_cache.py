"""Conversations' llama.cpp state kept when their sequence takes another conversation, and put
back when a prompt continues one: the prompt cache across chats (llama.cpp's own server calls it
--cache-ram).

A sequence's KV cache holds its last conversation, which its next turn reuses. When a prompt
that does not continue it lands on that sequence (another user's turn, another of the user's
chats), the conversation's state is copied out first (llama_state_seq_get_data: its KV cells,
tens of MB for thousands of tokens, copied in milliseconds); a later prompt that starts the same
way has it copied back into whichever sequence it gets, and only its new tokens are read, where
reading the whole conversation again takes a minute on a small CPU. Media chunks are kept the
same way: a conversation's state is its cells, whatever filled them.

States are kept in memory up to ``limit`` bytes, the least recently used let go first, and, with
a ``folder``, written there too (up to the same size), so that they outlive a restart: each file
holds what the state covers (its items) on its first line, then the state. A folder's states are
for one model file opened one way (``model_key``): another model's, or this one's with another
context size, cannot be put back, and live in another folder.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import llama_cpp as lib

# Fewer tokens are read again in less time than copying a state in is worth: shorter
# conversations are not kept, and a state that holds fewer more of a prompt is not put back.
MIN_ITEMS = 64
SUFFIX = ".state"

# An item of a sequence's cache: a token id, or a media chunk's key.
Item = int | tuple


@dataclass(eq=False)
class SavedState:
    """A conversation's state as its sequence held it: its ``items`` and the position after each
    (``ends``), the last prompt evaluated there and where that started (Batcher's reusable), the
    state's bytes where they are in memory and its file where it is on disk."""

    items: list[Item]
    ends: list[int]
    last_prompt: list[Item] | None
    last_start: int
    size: int
    state: bytearray | None = None
    file: Path | None = None

    def common(self, prompt: Sequence[Item]) -> int:
        """How many of ``prompt``'s first items this state holds."""
        count = 0
        for held, wanted in zip(self.items, prompt):
            if held != wanted:
                break
            count += 1
        return count


class PromptCache:
    """The saved states of one llama.cpp context's sequences; used from the batcher's thread only."""

    def __init__(self, ctx: Any, limit: int, folder: Path | None = None, model_key: str = "") -> None:
        self._ctx = ctx
        self.limit = limit
        self._folder = folder / model_key if folder is not None else None
        self._states: collections.OrderedDict[int, SavedState] = collections.OrderedDict()
        self._names = itertools.count()
        self.hits = 0
        # Read from other threads (the status line, /v1/models): replaced whole after each change.
        self.summary = {"conversations": 0, "memory_bytes": 0, "disk_bytes": 0, "hits": 0}
        if self._folder is not None:
            self._folder.mkdir(parents=True, exist_ok=True)
            self._read_folder()

    @property
    def persistent(self) -> bool:
        return self._folder is not None

    @property
    def in_memory(self) -> int:
        return sum(saved.size for saved in self._states.values() if saved.state is not None)

    @property
    def on_disk(self) -> int:
        return sum(saved.size for saved in self._states.values() if saved.file is not None)

    def _summarize(self) -> None:
        self.summary = {"conversations": len(self._states), "memory_bytes": self.in_memory, "disk_bytes": self.on_disk, "hits": self.hits}

    def best(self, prompt: Sequence[Item]) -> tuple[SavedState, int] | None:
        """The saved state that holds the longest start of ``prompt``, and how many items of it."""
        found = max(((saved, saved.common(prompt)) for saved in self._states.values()), key=lambda pair: pair[1], default=None)
        return found if found is not None and found[1] > 0 else None

    def keep(self, seq_id: int, items: list[Item], ends: list[int], last_prompt: list[Item] | None, last_start: int) -> None:
        """Copy out what sequence ``seq_id`` holds (``items``, as Batcher's _Sequence knows them),
        unless it is short or a state kept already holds it all."""
        if len(items) < MIN_ITEMS or any(saved.common(items) == len(items) for saved in self._states.values()):
            return
        size = lib.llama_state_seq_get_size(self._ctx, seq_id)
        if size == 0 or size > self.limit:
            return
        # Copied once, into the bytes kept: a state is tens of megabytes, and each copy costs.
        state = bytearray(size)
        written = lib.llama_state_seq_get_data(self._ctx, _pointer(state), size, seq_id)
        if written == 0:
            return
        if written < size:
            del state[written:]
        saved = SavedState(list(items), list(ends), list(last_prompt) if last_prompt else None, last_start, written, state)
        # A state this one holds the whole of is of no more use.
        for key, older in list(self._states.items()):
            if saved.common(older.items) == len(older.items):
                self._drop(key)
        key = next(self._names)
        self._states[key] = saved
        if self._folder is not None:
            saved.file = self._write(key, saved)
        self._fit()
        self._summarize()

    def take(self, saved: SavedState) -> bytearray | None:
        """The bytes of ``saved`` (read from its file where memory let them go), its use counted."""
        state = saved.state if saved.state is not None else self._read(saved)
        if state is not None:
            self.hits += 1
            for key, held in self._states.items():
                if held is saved:
                    self._states.move_to_end(key)
                    break
            self._summarize()
        return state

    def restore(self, state: bytearray, seq_id: int) -> bool:
        """Put ``state`` (take's) into sequence ``seq_id``, emptied first; False where llama.cpp refused it."""
        memory = lib.llama_get_memory(self._ctx)
        lib.llama_memory_seq_rm(memory, seq_id, 0, -1)
        if lib.llama_state_seq_set_data(self._ctx, _pointer(state), len(state), seq_id) == 0:
            lib.llama_memory_seq_rm(memory, seq_id, 0, -1)
            return False
        return True

    # ---- room

    def _fit(self) -> None:
        """Let go of the least recently used states past the limit, in memory, then on disk."""
        for key, saved in list(self._states.items()):
            if self.in_memory <= self.limit:
                break
            if saved.file is not None:
                saved.state = None
            else:
                self._drop(key)
        for key, saved in list(self._states.items()):
            if self.on_disk <= self.limit:
                break
            if saved.file is not None:
                saved.file.unlink(missing_ok=True)
                saved.file = None
                if saved.state is None:
                    self._drop(key)

    def _drop(self, key: int) -> None:
        saved = self._states.pop(key)
        if saved.file is not None:
            saved.file.unlink(missing_ok=True)

    # ---- the folder

    def _write(self, key: int, saved: SavedState) -> Path | None:
        path = self._folder / f"{os.getpid()}-{key}{SUFFIX}"
        header = {"items": saved.items, "ends": saved.ends, "last_prompt": saved.last_prompt, "last_start": saved.last_start}
        try:
            with open(path.with_suffix(".part"), "wb") as file:
                file.write(json.dumps(header).encode() + b"\n")
                file.write(saved.state)
            os.replace(path.with_suffix(".part"), path)
        except OSError:
            return None
        return path

    def _read(self, saved: SavedState) -> bytearray | None:
        if saved.file is None:
            return None
        try:
            with open(saved.file, "rb") as file:
                file.readline()
                state = bytearray(saved.size)
                return state if file.readinto(state) == saved.size else None
        except OSError:
            return None

    def _read_folder(self) -> None:
        """The states a run before this one wrote, oldest first (by when each was written)."""
        for path in sorted(self._folder.glob(f"*{SUFFIX}"), key=lambda path: path.stat().st_mtime):
            try:
                with open(path, "rb") as file:
                    header = json.loads(file.readline())
                    start = file.tell()
                    size = file.seek(0, os.SEEK_END) - start
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            items = [_item(item) for item in header["items"]]
            last = [_item(item) for item in header["last_prompt"]] if header.get("last_prompt") else None
            self._states[next(self._names)] = SavedState(items, header["ends"], last, header.get("last_start", 0), size, file=path)
        for stale in self._folder.glob("*.part"):
            stale.unlink(missing_ok=True)
        self._fit()
        self._summarize()


def _item(value: Any) -> Item:
    """An item as JSON gave it back: a media chunk's key was a tuple."""
    return tuple(value) if isinstance(value, list) else value


def model_key(path: str, settings: dict[str, Any]) -> str:
    """What a state can be put back into: the same model file (by size and time), the same
    llama.cpp and the same context settings."""
    stat = os.stat(path)
    shape = {name: settings.get(name) for name in ("n_ctx", "type_k", "type_v", "flash_attn", "n_gpu_layers")}
    described = json.dumps([os.path.abspath(path), stat.st_size, stat.st_mtime_ns, llama_cpp.__version__, shape], sort_keys=True, default=str)
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def _pointer(state: bytearray) -> Any:
    """``state`` as the uint8 pointer llama.cpp's state calls take, without a copy."""
    return ctypes.cast((ctypes.c_uint8 * len(state)).from_buffer(state), ctypes.POINTER(ctypes.c_uint8))
