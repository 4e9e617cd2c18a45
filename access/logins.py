"""The logins of --auth and --auth-file: checked alike for the page's login form and for the API,
with repeated failures slowed down by one LoginThrottle for both (guessing through /v1 is no
faster than through the form)."""

from __future__ import annotations

import hmac
from contextvars import ContextVar

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from limits import Limits

from .login_throttle import LoginThrottle, TooManyFailedLogins

TOO_MANY_REQUESTS = 429

# Gradio asks its auth function only for a user name and password: the address the login came
# from reaches it through here.
_client_address: ContextVar[str] = ContextVar("client_address", default="")


class Logins:
    """``users``: (user, password) pairs; none means a server without logins (true when it has
    some). ``throttle`` slows down failed tries, an API key's too."""

    def __init__(self, users: list[tuple[str, str]] | None = None, throttle: LoginThrottle | None = None) -> None:
        self.users = dict(users or ())
        self.throttle = throttle or LoginThrottle(Limits().max_login_wait)

    def __bool__(self) -> bool:
        return bool(self.users)

    def matches(self, user: str, password: str) -> bool:
        # Compared in constant time, and for an unknown name too, so that the time taken tells
        # neither the password nor which names exist.
        known = hmac.compare_digest(password.encode(), self.users.get(user, "").encode())
        return known and user in self.users

    async def page_login(self, user: str, password: str) -> bool:
        """Gradio's auth function (``auth=`` of mount_gradio_app), for its login form and
        gradio_client's logins."""
        try:
            return await self.throttle.attempt(_client_address.get(), user, lambda: self.matches(user, password))
        except TooManyFailedLogins as refused:
            raise HTTPException(TOO_MANY_REQUESTS, str(refused), headers={"Retry-After": str(refused.wait)}) from None


class ClientAddress:
    """ASGI middleware that makes each request's client address known to ``Logins.page_login``
    (uvicorn has already put there the address a trusted proxy forwarded)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        token = _client_address.set(client[0] if client else "")
        try:
            await self.app(scope, receive, send)
        finally:
            _client_address.reset(token)
