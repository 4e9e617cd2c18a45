"""A chat's messages as one shape wherever they are held whole: rows in the store, turns on the
page, entries of a conversation file. Each is a MessageTree of its own kind of message; only the
store names messages by id (its rows'), and only at its own door (on the page: the keeper that
writes a tab's tree into the store, chat/keeper.py).

A message's versions (regenerated, edited) are the messages that follow the same one; a branch is
a path from a first message down, and the chat shows one branch, the one that ends at ``shown``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Message = TypeVar("Message")
Other = TypeVar("Other")


@dataclass
class MessageTree(Generic[Message]):
    """Every message of a chat, every version, in the order written: ``messages[i]`` follows
    ``messages[parents[i]]``, an earlier one (None: a first message). ``shown``: the place of the
    last message of the branch the chat shows (None: no message at all)."""

    messages: list[Message]
    parents: list[int | None]
    shown: int | None = None
    _children: dict[int | None, list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.messages):
            raise ValueError(f"{len(self.messages)} messages but {len(self.parents)} parents")
        for place, parent in enumerate(self.parents):
            if parent is not None and not 0 <= parent < place:
                raise ValueError(f"message {place} follows {parent}, which is not an earlier one")
        if self.shown is not None and not 0 <= self.shown < len(self.messages):
            raise ValueError(f"the message shown, {self.shown}, is not in the tree")
        self._index()

    def _index(self) -> None:
        self._children = {}
        for place, parent in enumerate(self.parents):
            self._children.setdefault(parent, []).append(place)

    @classmethod
    def line(cls, messages: list[Message]) -> MessageTree[Message]:
        """One branch, each message following the one before it, the last shown."""
        return cls(messages, [place - 1 if place else None for place in range(len(messages))], len(messages) - 1 if messages else None)

    @classmethod
    def of_rows(cls, rows: Iterable[Message], id_of: Callable[[Message], Hashable], parent_of: Callable[[Message], Hashable | None],
                shown: Hashable | None = None) -> MessageTree[Message]:
        """Rows that name what they follow by id, in the order written (by id, ascending: a row
        follows an earlier one); a row whose parent is gone is a first message, and ``shown``
        names the shown one by its id (one that is gone: the branch of the row written last)."""
        rows = list(rows)
        place = {id_of(row): index for index, row in enumerate(rows)}
        parents = [place.get(parent_of(row)) for row in rows]
        # A parent written after its message (never by this app) is taken as gone, not as a loop.
        parents = [parent if parent is not None and parent < index else None for index, parent in enumerate(parents)]
        return cls(rows, parents, place.get(shown, len(rows) - 1 if rows else None))

    def __len__(self) -> int:
        return len(self.messages)

    def map(self, convert: Callable[[Message], Other]) -> MessageTree[Other]:
        """The same tree of other messages: ``convert`` of each."""
        return MessageTree([convert(message) for message in self.messages], list(self.parents), self.shown)

    def branch(self, through: int | None = None) -> list[int]:
        """The places of the branch shown, first message first; with ``through``, of the branch
        through that message and on to the message written last after it."""
        last = self.shown if through is None else max(self.below([through]))
        path = []
        while last is not None:
            path.append(last)
            last = self.parents[last]
        return path[::-1]

    def versions(self, place: int) -> list[int]:
        """The places of the message's versions (itself among them), oldest first."""
        return self._children[self.parents[place]]

    def shown_messages(self) -> list[Message]:
        """The messages of the branch shown, first message first."""
        return [self.messages[place] for place in self.branch()]

    def add(self, message: Message, after: int | None) -> int:
        """Put ``message`` after message ``after`` (None: as a first message) and show it; its place."""
        if after is not None and not 0 <= after < len(self.messages):
            raise ValueError(f"a message cannot follow {after}, which is not in the tree")
        self.messages.append(message)
        self.parents.append(after)
        self.shown = len(self.messages) - 1
        self._children.setdefault(after, []).append(self.shown)
        return self.shown

    def replace_shown(self, first: int, last: int, message: Message, copy: Callable[[Message], Message]) -> int:
        """A new branch that has ``message`` where the branch shown has its messages from ``first``
        to ``last``, then ``copy`` of each shown message after those; the branch shown before is
        the other version of ``first``. The place of the new branch's last message, which it shows."""
        shown = self.branch()
        place = self.add(message, self.parents[first])
        for kept in shown[shown.index(last) + 1:]:
            place = self.add(copy(self.messages[kept]), place)
        return place

    def show(self, place: int) -> None:
        """Show the branch through message ``place`` and on to the message written last after it."""
        self.shown = self.branch(through=place)[-1]

    def remove(self, places: Iterable[int]) -> list[int]:
        """Take ``places`` and every message after them out of the tree; the places the messages
        kept had before, in their order (the new places are 0, 1, ...). The branch shown ends
        at the nearest message before the first one taken out."""
        gone = set(self.below(places))
        kept = [place for place in range(len(self.messages)) if place not in gone]
        new_place = {old: new for new, old in enumerate(kept)}
        shown = self.shown
        while shown in gone:
            shown = self.parents[shown]
        # A kept message's parent is kept too: whatever follows a message taken out is taken out.
        self.parents[:] = [None if self.parents[old] is None else new_place[self.parents[old]] for old in kept]
        self.messages[:] = [self.messages[old] for old in kept]
        self.shown = None if shown is None else new_place[shown]
        self._index()
        return kept

    def below(self, places: Iterable[int]) -> list[int]:
        """``places`` and the places of every message after them, in every branch."""
        found, todo = [], list(places)
        while todo:
            found.append(todo.pop())
            todo += self._children.get(found[-1], [])
        return found
