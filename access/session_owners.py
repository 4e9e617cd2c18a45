"""A page tab's session, kept to the login that opened it.

Gradio keeps a tab's state (its chats, the chat it shows, its settings) under a session hash
that the browser makes up and sends with every event and in the URLs of its heartbeat and of
the stream its answers come by, so proxies log it. Whoever presents a hash gets that tab's
state and its answers, whatever login they send it with. With logins, the first login to use a
hash owns it; another login presenting it is refused: its events as they join the queue
(``keep_sessions_to_their_logins``), its heartbeats and answer streams before Gradio reads them
(``SessionOwnerCheck``).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

NOT_YOURS = "This page's session was opened by another login. Reload the page to open a session of your own."
# Gradio's URLs that name a session: /gradio_api/heartbeat/{hash}, /gradio_api/stream/{hash}/…,
# and /gradio_api/queue/data?session_hash={hash}.
_HASH_IN_PATH = re.compile(r"^/gradio_api/(?:heartbeat|stream)/([^/]+)")


class SessionOwners:
    """Which login first used each session hash, for the newest ``limit`` hashes (older tabs
    have long been closed: Gradio forgets a tab's state within hours)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._owners: OrderedDict[str, str] = OrderedDict()

    def admits(self, session_hash: str | None, login: str | None) -> bool:
        """Whether ``login`` may use ``session_hash``: where it is the first to, or its owner.
        Without a login (no logins on the server) a hash is nobody's."""
        if not session_hash or login is None:
            return True
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
    another login's session hash. ``login_of``: the login a request's cookies carry, if any."""

    def __init__(self, app: ASGIApp, owners: SessionOwners, login_of: Callable[[Request], str | None]) -> None:
        self.app = app
        self.owners = owners
        self.login_of = login_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/gradio_api/"):
            request = Request(scope)
            named = _HASH_IN_PATH.match(scope["path"])
            session_hash = named[1] if named else request.query_params.get("session_hash")
            if not self.owners.admits(session_hash, self.login_of(request)):
                await JSONResponse({"detail": NOT_YOURS}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)
