"""Who may use /v1: holders of the API key, and, on a server with logins, its users.

A server with logins takes them on /v1 too, rather than leaving the API open beside a login page
or refusing to start: whoever may use the page may use the model through the API, with the
credentials they already have. A login goes as the API key (``Authorization: Bearer USER:PASS``,
which is what the openai client sends for ``api_key="USER:PASS"``, or ``x-api-key``, which is
what Anthropic's sends) or as HTTP Basic (``curl -u``).
Failed tries, of the key or a login, are slowed down with the page's own login throttle.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from access import Logins, TooManyFailedLogins

from .errors import API_PREFIX, METRICS_PATH, APIError

# Bearer rather than Basic: a browser that gets a Basic challenge asks for a password and then
# sends it by itself with every later request to this origin, pages of other sites' included.
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="anychat"'}


class ApiAccess:
    """Who may send requests to /v1: holders of ``api_key`` and users of ``logins`` (anyone, when
    both are empty)."""

    def __init__(self, api_key: str | None = None, logins: Logins | None = None) -> None:
        self.api_key = api_key
        self.logins = logins if logins is not None else Logins()

    def describe(self) -> str:
        """How /v1 takes requests, for the startup line."""
        if self.api_key is not None and self.logins:
            return "the API key, or a login of the page as USER:PASS (as the API key, or HTTP Basic)"
        if self.logins:
            return "the page's logins: send USER:PASS as the API key, or as HTTP Basic"
        if self.api_key is not None:
            return "API key required"
        return "open: no API key"

    async def user(self, authorization: str, address: str) -> str | None:
        """The login a request with this Authorization header is made with (None for the API
        key, or where nothing is asked for); an APIError (401, or 429 while tries from
        ``address`` or for the user name are slowed down) for anyone else."""
        if self.api_key is None and not self.logins:
            return None
        token, login = _credentials(authorization)
        try:
            accepted = await self.logins.throttle.attempt(
                address, login[0] if login and self.logins else None, lambda: self._login_user(login) is not None or self._is_key(token))
        except TooManyFailedLogins as refused:
            raise APIError(429, str(refused), code="rate_limit_exceeded", headers={"Retry-After": str(refused.wait)}) from None
        if not accepted:
            raise APIError(401, self._refusal(), code="invalid_api_key", headers=CHALLENGE)
        return self._login_user(login)

    def _login_user(self, login: tuple[str, str] | None) -> str | None:
        return login[0] if login is not None and self.logins.matches(*login) else None

    def _is_key(self, token: str) -> bool:
        return self.api_key is not None and bool(token) and hmac.compare_digest(token.encode(), self.api_key.encode())

    def _refusal(self) -> str:
        if self.logins:
            key = "this server's API key (--api-key or ANYCHAT_API_KEY), or " if self.api_key is not None else ""
            return (
                f"Incorrect or missing credentials. Send {key}a login of this server's page as USER:PASS, "
                "as 'Authorization: Bearer USER:PASS' (the openai client's api_key) or 'x-api-key: USER:PASS' (Anthropic's), or as HTTP Basic."
            )
        return (
            "Incorrect or missing API key. Send the key this server was started with "
            "(--api-key or ANYCHAT_API_KEY) as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
        )


def _authorization(headers: Headers) -> str:
    """The request's Authorization, or its ``x-api-key`` (what Anthropic's clients send) as a
    bearer token: the same keys and logins either way."""
    key = headers.get("x-api-key")
    return headers.get("authorization", "") or (f"Bearer {key}" if key else "")


def _credentials(authorization: str) -> tuple[str, tuple[str, str] | None]:
    """The bearer token (empty for HTTP Basic) and the (user, password) it may be, from an
    Authorization header. A key may hold a colon too: both are tried."""
    scheme, _, value = authorization.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        token = login = value
    elif scheme == "basic":
        try:
            token, login = "", base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "", None
    else:
        return "", None
    user, colon, password = login.partition(":")
    return token, (user, password) if colon else None


class ApiAccessCheck:
    """ASGI middleware checking every /v1 request (and /metrics) with ``access`` before any of its body is read
    (FastAPI reads and parses a body before a route's dependencies run), so that an outsider
    costs the server no parsing. The login goes in ``request.state.user`` for the routes."""

    def __init__(self, app: ASGIApp, access: ApiAccess) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (scope["path"] in (API_PREFIX, METRICS_PATH) or scope["path"].startswith(f"{API_PREFIX}/")):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        try:
            user = await self.access.user(_authorization(Headers(scope=scope)), client[0] if client else "")
        except APIError as refused:
            await JSONResponse(refused.body_for(scope["path"]), status_code=refused.status, headers=refused.headers)(scope, receive, send)
            return
        scope.setdefault("state", {})["user"] = user
        await self.app(scope, receive, send)
