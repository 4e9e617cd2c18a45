"""A page tab's session, kept to the login that opened it.

Gradio keeps a tab's state (its chats, the chat it shows, its settings) under a session hash
that the browser makes up and sends with every event and in the URLs of its heartbeat and of
the stream its answers come by, so proxies log it. Whoever presents a hash gets that tab's
state and its answers, whatever login they send it with. With logins, the first login to use a
hash owns it; another login presenting it is refused: its events as they join the queue
(``keep_sessions_to_their_logins``), its heartbeats, answer streams and cancels before Gradio
reads them (``SessionOwnerCheck``).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOT_YOURS = "This page's session was opened by another login. Reload the page to open a session of your own."
# Gradio's URLs that name a session: /gradio_api/heartbeat/{hash}, /gradio_api/stream/{hash}/…,
# and /gradio_api/queue/data?session_hash={hash}.
_HASH_IN_PATH = re.compile(r"^/gradio_api/(?:heartbeat|stream)/([^/]+)")
# Gradio's route that cancels a session's events, which names the session in its JSON body.
CANCEL = "/gradio_api/cancel"
CANCEL_BODY_LIMIT = 64 * 1024


class SessionOwners:
    """Which login first used each session hash, for the newest ``limit`` hashes (older tabs
    have long been closed: Gradio forgets a tab's state within hours)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._owners: OrderedDict[str, str] = OrderedDict()

    def admits(self, session_hash: str | None, login: str | None) -> bool:
        """Whether ``login`` may use ``session_hash``: where it is the first to, or its owner. A
        request without a login (one Gradio does not check for one) may use only a hash nobody owns."""
        if not session_hash:
            return True
        if login is None:
            return session_hash not in self._owners
        owner = self._owners.setdefault(session_hash, login)
        self._owners.move_to_end(session_hash)
        if len(self._owners) > self.limit:
            self._owners.popitem(last=False)
        return owner == login


def keep_sessions_to_their_logins(demo: Any, owners: SessionOwners) -> None:
    """Refuse (400) every event that a login sends ``demo`` (a queued gr.Blocks) with another
    login's session hash, as it joins the queue: before it waits, runs or sees that session's
    state. Every event of a page, and of Gradio's own API routes, joins through Queue.push."""
    queue = demo._queue
    push = queue.push

    async def owned_push(body: Any, request: Any, username: str | None) -> tuple[bool, Any, str]:
        if not owners.admits(body.session_hash, username):
            return False, NOT_YOURS, "error"
        return await push(body=body, request=request, username=username)

    queue.push = owned_push


class SessionOwnerCheck:
    """ASGI middleware refusing (403) a heartbeat or answer stream that a login opens with
    another login's session hash, and a cancel of its events (Gradio's cancel route checks no
    login at all). ``login_of``: the login a request's cookies carry, if any."""

    def __init__(self, app: ASGIApp, owners: SessionOwners, login_of: Callable[[Request], str | None]) -> None:
        self.app = app
        self.owners = owners
        self.login_of = login_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/gradio_api/"):
            await self.app(scope, receive, send)
            return
        http = Request(scope)
        named = _HASH_IN_PATH.match(scope["path"])
        session_hash = named[1] if named else http.query_params.get("session_hash")
        if scope["path"] == CANCEL and scope["method"] == "POST":
            body = await _small_body(receive)
            if body is None:
                await JSONResponse({"detail": "A cancel's body is a few bytes."}, status_code=413)(scope, receive, send)
                return
            session_hash = _session_hash_in(body)
            receive = _replaying(body, receive)
        if not self.owners.admits(session_hash, self.login_of(http)):
            await JSONResponse({"detail": NOT_YOURS}, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _small_body(receive: Receive) -> bytes | None:
    """The request's body, or None past CANCEL_BODY_LIMIT."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > CANCEL_BODY_LIMIT:
            return None
        if not message.get("more_body"):
            return body


def _session_hash_in(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None  # Gradio refuses it
    return value.get("session_hash") if isinstance(value, dict) and isinstance(value.get("session_hash"), str) else None


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives ``body`` once, then what the client sends next (its disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
