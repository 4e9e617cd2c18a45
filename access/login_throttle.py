"""Repeated failed logins slowed down, on the page's login form and on the API alike.

Each address and each user name has a record of its recent failures. After ``FREE_FAILURES`` of
them, the next try waits 1 s after the last failure, then 2, 4, … up to the server's
``max_login_wait``. A try that comes sooner is held until its time and then checked, so that
someone who mistyped a few times only waits a little, and the login form shows its answer as
usual; a second try of the same address or user name while one is held is refused at once, so
that guessing in parallel gains nothing.

A user name's record only slows clients that have failed themselves: whoever hammers "alice" from
elsewhere cannot keep the real alice, on her own first try, from logging in. Guessing one name
from many addresses still gets a single fast try per address.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
# A record untouched this long is forgotten: old failures no longer slow anybody.
FORGET_AFTER_SECONDS = 15 * 60
# An attacker trying endless made-up user names or addresses cannot fill the memory with records.
MAX_RECORDS = 10_000


class TooManyFailedLogins(Exception):
    """A try refused unchecked: another try of the same address or user name is already held."""

    def __init__(self, wait: float) -> None:
        self.wait = max(1, math.ceil(wait))
        super().__init__(
            f"Too many failed logins from this address or for this user name: one try is already waiting its turn. "
            f"Try again in {self.wait} s."
        )


@dataclass
class _Failures:
    count: int
    last: float
    held: bool = False


class LoginThrottle:
    """The failures of the last minutes, by address and by user name."""

    def __init__(self, max_wait: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_wait = max_wait
        self.clock = clock
        self.records: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    async def attempt(self, address: str, user: str | None, check: Callable[[], bool]) -> bool:
        """``check()``, once this address (and, for an address with failures, this user name) may
        try again; a failure is recorded against both. Raises TooManyFailedLogins when a try of
        either is already waiting."""
        self._forget_old()
        keys = [("address", address)]
        if user is not None and keys[0] in self.records:
            keys.append(("user", user))
        records = [self.records[key] for key in keys if key in self.records]
        opens_at = max((self._opens_at(record) for record in records), default=0.0)
        if any(record.held for record in records):
            raise TooManyFailedLogins(opens_at - self.clock())
        if opens_at > self.clock():
            for record in records:
                record.held = True
            try:
                await asyncio.sleep(opens_at - self.clock())
            finally:
                for record in records:
                    record.held = False
        accepted = check()
        if accepted:
            self.records.pop(("address", address), None)
        else:
            self._fail(("address", address))
            if user is not None:
                self._fail(("user", user))
        return accepted

    def _opens_at(self, record: _Failures) -> float:
        if record.count < FREE_FAILURES:
            return 0.0
        return record.last + min(2.0 ** (record.count - FREE_FAILURES), self.max_wait)

    def _fail(self, key: tuple[str, str]) -> None:
        record = self.records.pop(key, None) or _Failures(0, 0.0)
        record.count += 1
        record.last = self.clock()
        self.records[key] = record  # the newest at the end, so the oldest are forgotten first
        while len(self.records) > MAX_RECORDS:
            self.records.popitem(last=False)

    def _forget_old(self) -> None:
        now = self.clock()
        while self.records:
            key, record = next(iter(self.records.items()))
            if now - record.last < FORGET_AFTER_SECONDS or record.held:
                break
            del self.records[key]
