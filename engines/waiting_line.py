"""The line in front of the loaded model: which requests generate, which wait, and in what order.

Every engine's request path goes through one ``WaitingLine`` (``BaseEngine.line``), so no
backend is handed more than ``max_concurrent`` requests at once and none keeps a queue of its
own that nobody can see into. A request beyond those slots waits its turn and can follow its
place as the line moves; once ``max_waiting`` requests wait, the next one is refused at once
instead of piling up behind them.

The line is shared fairly between users (a login name, or a client's address): one user may
have at most ``max_waiting_per_user`` requests waiting, and a free slot goes to the user whose
last turn is longest ago, first come first served among a user's own requests. So one user's
many requests neither fill the line nor keep the others waiting for all of them.

The line lives on the engine's event loop and is only touched from it, so it needs no lock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import ConfigError, ModelBusyError

T = TypeVar("T")


def line_user(login: str | None, address: str | None) -> str:
    """Whom a request counts for in the line: its login name where the server has logins, else
    the address it came from (so a login and an address never share a share)."""
    return f"login {login}" if login else f"address {address or 'unknown'}"


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting request stands: ``ahead`` requests must finish before it starts; 0 means
    it starts now."""

    ahead: int


class Ticket:
    """One reply's place: a place in line until it is admitted, then a generating slot. Leaving
    (the ``with`` block ends, however) frees whichever it holds, at once."""

    def __init__(self, line: WaitingLine, user: str | None, arrival: int) -> None:
        self._line = line
        self.user = user
        self.arrival = arrival
        self.admitted = False
        self._moved = asyncio.Event()
        self._left = False

    @property
    def ahead(self) -> int:
        """How many requests must finish before this one starts. All slots are taken while
        anyone waits, so that is everyone the line will admit before it, plus one slot to come free."""
        return 0 if self.admitted else self._line._admission_order()[self] + 1

    async def places(self) -> AsyncIterator[QueuePlace]:
        """This reply's place each time it changes, ending with ``ahead == 0`` once admitted;
        nothing at all for a reply admitted at once."""
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


class Places(tuple[Ticket, ...]):
    """The tickets of one request, one per reply it writes side by side; leaving the ``with``
    block (however) gives them all up."""

    def __enter__(self) -> Places:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for ticket in self:
            ticket.leave()


class WaitingLine:
    """At most ``slots`` replies generate at once; at most ``max_waiting`` wait for a slot, at
    most ``max_waiting_per_user`` of them for one user."""

    def __init__(self, slots: int, max_waiting: int, max_waiting_per_user: int) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.max_waiting_per_user = max_waiting_per_user
        self.running = 0
        self._waiting: list[Ticket] = []
        self._arrivals = itertools.count()
        self._turns = itertools.count()
        # For each user holding a ticket: how many, and when they were last admitted.
        self._held: Counter[str | None] = Counter()
        self._last_turn: dict[str | None, int] = {}
        self._order: dict[Ticket, int] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def most_per_user(self) -> int:
        """The most places one user may hold: every slot, and their share of the waiting."""
        return self.slots + min(self.max_waiting, self.max_waiting_per_user)

    def join(self, user: str | None = None, count: int = 1) -> Places:
        """Places for the ``count`` replies of one request from ``user``, taken all at once or
        not at all: each is admitted at once while a slot is free and nobody waits, the rest wait
        at the end of the line. ModelBusyError if they do not all fit now, ConfigError if they
        never could."""
        most = self.most_per_user
        if count > most:
            raise ConfigError(
                f"This request asks for {count} replies written side by side, each needing its own place, and one user may "
                f"hold at most {most} here ({self.slots} answered at once, {min(self.max_waiting, self.max_waiting_per_user)} "
                "waiting). Ask for fewer replies (n), or for all of them in one answer rather than streamed."
            )
        free = 0 if self._waiting else max(0, self.slots - self.running)
        to_wait = max(0, count - free)
        if len(self._waiting) + to_wait > self.max_waiting:
            raise ModelBusyError(
                f"The model is busy: {self.running} request(s) are being answered and {len(self._waiting)} are waiting, "
                f"the most this server lets wait (max_waiting={self.max_waiting}; app.py --max-waiting). "
                "Try again in a moment."
            )
        own = sum(1 for ticket in self._waiting if ticket.user == user)
        if own + to_wait > self.max_waiting_per_user:
            raise ModelBusyError(
                f"Your requests already hold {own} place(s) in line, and this one would make {own + to_wait}: one user may hold "
                f"at most {self.max_waiting_per_user} (max_waiting_per_user={self.max_waiting_per_user}; app.py --max-waiting-per-user), "
                "so that others get their turn too. Try again once your earlier requests are answered."
            )
        tickets = Places(Ticket(self, user, next(self._arrivals)) for _ in range(count))
        self._held[user] += count
        for index, ticket in enumerate(tickets):
            if index < count - to_wait:
                self._admit(ticket)
            else:
                self._waiting.append(ticket)
        self._order = None
        return tickets

    def _admit(self, ticket: Ticket) -> None:
        ticket.admitted = True
        self.running += 1
        self._last_turn[ticket.user] = next(self._turns)

    def _next_turn(self, user: str | None) -> int:
        """Which user's request goes first: the one whose last turn is longest ago (never, for
        one just arrived)."""
        return self._last_turn.get(user, -1)

    def _leave(self, ticket: Ticket) -> None:
        if ticket.admitted:
            self.running -= 1
        else:
            self._waiting.remove(ticket)
        self._held[ticket.user] -= 1
        if not self._held[ticket.user]:
            del self._held[ticket.user]
            self._last_turn.pop(ticket.user, None)
        while self._waiting and self.running < self.slots:
            # min() keeps the first of equals: a user's own requests, and users never admitted, go in order of arrival.
            admitted = min(self._waiting, key=lambda waiting: self._next_turn(waiting.user))
            self._waiting.remove(admitted)
            self._admit(admitted)
            admitted._moved.set()
        self._order = None
        for behind in self._waiting:
            behind._moved.set()

    def _admission_order(self) -> dict[Ticket, int]:
        """Each waiting ticket's position in the order the line will admit them, if nobody else
        comes: the users take turns, as ``_leave`` picks them."""
        if self._order is None:
            queues: dict[str | None, deque[Ticket]] = defaultdict(deque)
            for ticket in self._waiting:
                queues[ticket.user].append(ticket)
            turns = [(self._next_turn(user), queue[0].arrival, user) for user, queue in queues.items()]
            heapq.heapify(turns)
            order: dict[Ticket, int] = {}
            coming_turns = itertools.count(max(self._last_turn.values(), default=0) + 1)
            while turns:
                _, _, user = heapq.heappop(turns)
                queue = queues[user]
                order[queue.popleft()] = len(order)
                if queue:
                    heapq.heappush(turns, (next(coming_turns), queue[0].arrival, user))
            self._order = order
        return self._order


class PreparationTurns:
    """Preparing requests (rendering, tokenizing, decoding media) runs on worker threads, never
    on the event loop that streams every reply, and at most ``at_once`` of them at a time. A
    user's requests are prepared one after the other, so that one user's many requests queue
    behind each other rather than in front of everyone else's."""

    def __init__(self, at_once: int) -> None:
        self._at_once = asyncio.Semaphore(at_once)
        self._users: dict[str | None, asyncio.Lock] = {}
        self._holders: Counter[str | None] = Counter()

    def held(self, user: str | None) -> int:
        """How many of ``user``'s works run or wait for their turn."""
        return self._holders[user]

    async def run(self, user: str | None, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` on a worker thread once it is ``user``'s turn. A caller that gives up
        keeps the turn until the work has really ended, so abandoned work counts too."""
        lock = self._users.setdefault(user, asyncio.Lock())
        self._holders[user] += 1
        try:
            async with lock, self._at_once:
                done = asyncio.ensure_future(asyncio.to_thread(work, *args))
                try:
                    return await asyncio.shield(done)
                except asyncio.CancelledError:
                    await asyncio.wait([done])
                    raise
        finally:
            self._holders[user] -= 1
            if not self._holders[user]:
                del self._holders[user], self._users[user]
