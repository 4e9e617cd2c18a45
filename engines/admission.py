"""The line in front of the loaded model: which requests generate, which wait, and in what order.

Every engine's request path goes through one ``WaitingLine`` (``BaseEngine.line``), so no
backend is handed more than ``max_concurrent`` requests at once and none keeps a queue of its
own that nobody can see into. A request beyond those slots waits its turn, first come first
served, and can follow its place as the line moves; once ``max_waiting`` requests wait, the next
one is refused at once instead of piling up behind them.

The line lives on the engine's event loop and is only touched from it, so it needs no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .errors import ModelBusyError


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting request stands: ``ahead`` requests must finish before it starts; 0 means
    it starts now."""

    ahead: int


class Ticket:
    """One request's place: a place in line until it is admitted, then a generating slot. Leaving
    (the ``with`` block ends, however) frees whichever it holds, at once."""

    def __init__(self, line: WaitingLine, admitted: bool) -> None:
        self._line = line
        self.admitted = admitted
        self._moved = asyncio.Event()
        self._left = False

    @property
    def ahead(self) -> int:
        """How many requests must finish before this one starts. All slots are taken while
        anyone waits, so that is everyone before it in line, plus one slot to come free."""
        return 0 if self.admitted else self._line._waiting.index(self) + 1

    async def places(self) -> AsyncIterator[QueuePlace]:
        """This request's place each time it changes, ending with ``ahead == 0`` once admitted;
        nothing at all for a request admitted at once."""
        if self.admitted:
            return
        shown = None
        while not self.admitted:
            # Cleared before looking, so a move while the caller holds a yielded place still wakes us.
            self._moved.clear()
            if self.ahead != shown:
                shown = self.ahead
                yield QueuePlace(shown)
            else:
                await self._moved.wait()
        yield QueuePlace(0)

    async def wait(self) -> None:
        """Until admitted."""
        async for _ in self.places():
            pass

    def leave(self) -> None:
        if not self._left:
            self._left = True
            self._line._leave(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.leave()


class WaitingLine:
    """At most ``slots`` requests generate at once; at most ``max_waiting`` wait for a slot."""

    def __init__(self, slots: int, max_waiting: int) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.running = 0
        self._waiting: list[Ticket] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def join(self) -> Ticket:
        """A ticket for one request: admitted at once if a slot is free and nobody waits, else a
        place at the end of the line; ModelBusyError if the line is full."""
        if self.running < self.slots and not self._waiting:
            self.running += 1
            return Ticket(self, admitted=True)
        if len(self._waiting) >= self.max_waiting:
            raise ModelBusyError(
                f"The model is busy: {self.running} request(s) are being answered and {len(self._waiting)} are waiting, "
                f"the most this server lets wait (max_waiting={self.max_waiting}; app.py --max-waiting). "
                "Try again in a moment."
            )
        ticket = Ticket(self, admitted=False)
        self._waiting.append(ticket)
        return ticket

    def _leave(self, ticket: Ticket) -> None:
        if ticket.admitted:
            self.running -= 1
        else:
            self._waiting.remove(ticket)
        while self._waiting and self.running < self.slots:
            admitted = self._waiting.pop(0)
            admitted.admitted = True
            self.running += 1
            admitted._moved.set()
        for behind in self._waiting:
            behind._moved.set()
