"""A page tab's session, kept to the login that opened it.

Gradio keeps a tab's state (its chats, the chat it shows, its settings) under a session hash
that the browser makes up and sends with every event and in the URLs of its heartbeat and of
the stream its answers come by, so proxies log it. Whoever presents a hash gets that tab's
state and its answers, whatever login they send it with. With logins, the login whose event
first ran under a hash owns it; another login presenting it is refused: its events as they join
the queue (``keep_sessions_to_their_logins``), and every other route that names a session (the
events run outside the queue, heartbeats, answer streams, cancels) before Gradio reads them
(``SessionOwnerCheck``).

A hash is taken only in the shape Gradio's clients make (``SESSION_HASH``), and recorded only
for an event a route accepted; each login keeps at most ``SessionOwners.per_login`` of them, so
that neither the table's memory nor one login's flood of made-up hashes reaches another login's.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOT_YOURS = "This page's session was opened by another login. Reload the page to open a session of your own."
NOT_A_SESSION = "This request's session hash is not one the page makes (1 to 64 of a-z, 0-9, _ and -). Reload the page."
FORM_NOT_TAKEN = "This page's components take no files by their server functions: send the request as JSON."
# The page's client makes Math.random().toString(36).substring(2) (about 11 of [a-z0-9]),
# gradio_client a UUID (36 of [0-9a-f-]); the rest is slack for other clients.
SESSION_HASH = re.compile(r"[a-z0-9_-]{1,64}")
# Gradio's URLs that name a session: /gradio_api/heartbeat/{hash}, /gradio_api/stream/{hash}/…;
# others name it in their query (?session_hash=, /gradio_api/queue/data and /gradio_api/deep_link).
_HASH_IN_PATH = re.compile(r"^/gradio_api/(?:heartbeat|stream)/([^/]*)")
# Gradio's routes that name the session in their JSON body, outside the queue: an event run
# directly (/run, and its older name /api), a cancel, a component's server function.
_EVENT_RUN_DIRECTLY = re.compile(r"^/gradio_api/(?:run|api)/[^/]+/?$")
_HASH_IN_BODY = re.compile(r"^/gradio_api/(?:(?:run|api)/[^/]+/?|cancel|component_server/?)$")
_COMPONENT_SERVER = re.compile(r"^/gradio_api/component_server/?$")


def is_session_hash(value: Any) -> bool:
    return isinstance(value, str) and SESSION_HASH.fullmatch(value) is not None


class SessionOwners:
    """The login that owns each session hash. Each login keeps its ``per_login`` most recently
    used hashes; past that its least recently used one is forgotten and ``end_session`` is
    called with it, so that whoever presents that hash afterwards starts an empty session, with
    nothing of the tab that used it. A login's hashes are never forgotten for another's."""

    def __init__(self, per_login: int = 256, end_session: Callable[[str], None] = lambda session_hash: None) -> None:
        self.per_login = per_login
        self.end_session = end_session
        self._owners: dict[str, str] = {}
        self._hashes_of: dict[str, OrderedDict[str, None]] = {}

    def owner_of(self, session_hash: str) -> str | None:
        return self._owners.get(session_hash)

    def admits(self, session_hash: str, login: str | None) -> bool:
        """Whether ``login`` may use ``session_hash`` without running an event under it: where
        nobody owns it, or ``login`` does. A request without a login (on a route where Gradio
        checks none) may use only a hash nobody owns."""
        owner = self._owners.get(session_hash)
        if owner is None:
            return True
        if owner == login:
            self._hashes_of[owner].move_to_end(session_hash)
        return owner == login

    def claim(self, session_hash: str, login: str | None) -> bool:
        """Whether ``login`` may run an event under ``session_hash``; where nobody owns it, it
        becomes ``login``'s. Without a login nothing is recorded (Gradio refuses the event)."""
        if login is None or session_hash in self._owners:
            return self.admits(session_hash, login)
        hashes = self._hashes_of.setdefault(login, OrderedDict())
        if len(hashes) >= self.per_login:
            self.forget(next(iter(hashes)))
        hashes[session_hash] = None
        self._owners[session_hash] = login
        return True

    def forget(self, session_hash: str) -> None:
        owner = self._owners.pop(session_hash, None)
        if owner is not None:
            del self._hashes_of[owner][session_hash]
            self.end_session(session_hash)


def state_dropper(demo: Any) -> Callable[[str], None]:
    """Drops a session's state from ``demo``'s Gradio state holder, as Gradio drops its oldest."""
    def drop(session_hash: str) -> None:
        holder = demo.state_holder
        with holder.lock:
            holder.session_data.pop(session_hash, None)
            holder.time_last_used.pop(session_hash, None)

    return drop


def keep_sessions_to_their_logins(demo: Any, owners: SessionOwners) -> None:
    """Refuse (400) every event that a login sends ``demo`` (a queued gr.Blocks) with another
    login's session hash, or one of no shape Gradio makes, as it joins the queue: before it
    waits, runs or sees that session's state; record the hash of every event the queue takes.
    Every event of a page, and of Gradio's /call routes, joins through Queue.push."""
    queue = demo._queue
    push = queue.push

    async def owned_push(body: Any, request: Any, username: str | None) -> tuple[bool, Any, str]:
        session_hash = body.session_hash
        if session_hash is None:  # Gradio names the event's session after the event itself
            return await push(body=body, request=request, username=username)
        if not is_session_hash(session_hash):
            return False, NOT_A_SESSION, "error"
        unowned = owners.owner_of(session_hash) is None
        if not owners.claim(session_hash, username):
            return False, NOT_YOURS, "error"
        pushed = await push(body=body, request=request, username=username)
        if unowned and not pushed[0]:
            owners.forget(session_hash)
        return pushed

    queue.push = owned_push


class SessionOwnerCheck:
    """ASGI middleware, on Gradio's own app (inside the page's body limit), refusing every route
    outside the queue that names a session: with a hash of no shape Gradio makes (400), before
    reading or recording it; with another login's hash (403), an event run directly, a
    heartbeat, an answer stream, a cancel (Gradio's cancel route checks no login at all). An
    event run directly claims its hash, given up again unless Gradio answers the event.
    ``login_of``: the login a request's cookies carry, if any."""

    def __init__(self, app: ASGIApp, owners: SessionOwners, login_of: Callable[[Request], str | None]) -> None:
        self.app = app
        self.owners = owners
        self.login_of = login_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if scope["type"] != "http" or not path.startswith("/gradio_api/"):
            await self.app(scope, receive, send)
            return
        http = Request(scope)
        named = _HASH_IN_PATH.match(path)
        session_hash = named[1] if named else http.query_params.get("session_hash")
        if scope["method"] == "POST" and _HASH_IN_BODY.match(path):
            if _COMPONENT_SERVER.match(path) and http.headers.get("content-type", "").startswith("multipart/"):
                await _refuse(400, FORM_NOT_TAKEN, scope, receive, send)
                return
            try:
                body = await _whole_body(receive)
            except HTTPException as refused:  # the page's body limit, outside
                await _refuse(refused.status_code, refused.detail, scope, receive, send)
                return
            session_hash = _session_hash_in(body)
            receive = _replaying(body, receive)
        if session_hash is None:
            await self.app(scope, receive, send)
            return
        if not is_session_hash(session_hash):
            await _refuse(400, NOT_A_SESSION, scope, receive, send)
            return
        login = self.login_of(http)
        if scope["method"] == "POST" and _EVENT_RUN_DIRECTLY.match(path):
            unowned = self.owners.owner_of(session_hash) is None
            if not self.owners.claim(session_hash, login):
                await _refuse(403, NOT_YOURS, scope, receive, send)
                return
            if unowned:
                await self._forgetting_unless_answered(session_hash, scope, receive, send)
                return
        elif not self.owners.admits(session_hash, login):
            await _refuse(403, NOT_YOURS, scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _forgetting_unless_answered(self, session_hash: str, scope: Scope, receive: Receive, send: Send) -> None:
        """The request, ``session_hash`` forgotten where Gradio refuses the event claimed under it
        or fails on it (an unknown listener raises through to the server's 500)."""
        answered = False

        async def sent(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = message["status"] == 200
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            if not answered:
                self.owners.forget(session_hash)


async def _refuse(status: int, detail: str, scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)


async def _whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _session_hash_in(body: bytes) -> Any:
    """The body's session_hash, as sent (None where it names none, or is no JSON: Gradio refuses it)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value.get("session_hash") if isinstance(value, dict) else None


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
