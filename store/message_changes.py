"""What one save writes into a chat's messages: those it adds, each after the one it follows,
those it changes and those it removes, naming messages by their ids in the store or, for those
the same save adds, by their place in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Added:
    """The ``index``-th message a write adds, where the same write names it (as yet it has no id)."""

    index: int


# A message in a write: its id, a message the write adds, or (None) none.
MessageRef = int | Added | None


@dataclass
class MessageChanges:
    """What one save writes into a chat: messages ``added``, each following the message its
    ``follows`` names (an Added one: an earlier one of ``added``; None: a first message),
    ``changed`` by id, and the ids of those ``removed`` (each with the messages after it, in
    every branch). A message is a dict with its ``role`` and ``content``, and its ``state`` (see
    tables.Message). ``shown``: the last message of the branch the page shows."""

    added: list[dict[str, Any]]
    follows: list[MessageRef]
    changed: dict[int, dict[str, Any]]
    removed: list[int]
    shown: MessageRef = None

    @classmethod
    def line(cls, added: list[dict[str, Any]], after: int | None = None) -> MessageChanges:
        """Messages added one after the other, the first after message ``after``, the last shown."""
        follows: list[MessageRef] = [after, *(Added(index) for index in range(len(added) - 1))]
        return cls(added, follows[:len(added)], {}, [], Added(len(added) - 1) if added else after)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)
