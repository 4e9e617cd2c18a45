"""A cap on the size of request bodies: /v1's, answered with a 413 in OpenAI's error shape, and
the page's (server.py bounds those with a second instance)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from limits import size_text

from .errors import API_PREFIX

REQUEST_TOO_LARGE = 413


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIX)


class BodyLimit:
    """ASGI middleware: a body whose Content-Length is over ``limit`` is refused before any of
    it is read; one sent without a length (chunked) is counted as it arrives and refused once
    over, so the server never holds more than the limit of it. The refusal is raised where the
    route reads the body (FastAPI passes HTTPExceptions from there on), so the app's own error
    handler words it. ``covers``: the request paths it bounds (the API's unless told);
    ``flag``: the setting the refusal names; ``advice``: what the refusal tells the sender to do."""

    def __init__(self, app: ASGIApp, limit: int, covers: Callable[[str], bool] = is_api_path, flag: str = "--max-request-size",
                 advice: str = "Send smaller media, or ask the server's operator to raise the limit") -> None:
        self.app = app
        self.limit = limit
        self.covers = covers
        self.flag = flag
        self.advice = advice

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.covers(scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        received = 0

        async def counted() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > self.limit:
                raise self.refusal(f"is {size_text(int(declared))},")
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise self.refusal("is")
            return message

        await self.app(scope, counted, send)

    def refusal(self, size: str) -> HTTPException:
        """``size``: how the message says the body's size ("is 3 MB," or, for a body sent in chunks, "is")."""
        return HTTPException(
            REQUEST_TOO_LARGE,
            f"the request body {size} over this server's limit of {size_text(self.limit)} (set with {self.flag}). {self.advice}",
        )
