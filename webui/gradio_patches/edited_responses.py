"""ASGI middleware that edits the body of some of Gradio's answers before they leave the server:
where Gradio 6.31's page wastes the browser's time, and the fix has to be in what it serves."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


Edit = Callable[[bytes, str], bytes]


def chained(*edits: Edit) -> Edit:
    """One edit making each of ``edits`` in turn."""
    def edit(body: bytes, content_type: str) -> bytes:
        for one in edits:
            body = one(body, content_type)
        return body
    return edit


class EditedResponses:
    """Answers to ``GET`` requests whose path ``covers`` pass through ``edit(body, content_type)``,
    which returns the body to send. The request goes in without Accept-Encoding, so that the body
    comes back as text (Gradio serves its scripts compressed to browsers that accept it), and
    without Range: a part of the file is not a part of the edited body. The answer's ETag is the
    file's, marked as edited (the edit depends on the file alone, so a revalidation the file
    passes, the edited body passes too)."""

    def __init__(self, app: ASGIApp, covers: Callable[[str], bool], edit: Edit) -> None:
        self.app = app
        self.covers = covers
        self.edit = edit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not self.covers(scope["path"]):
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": [_as_for_the_file(name, value) for name, value in scope["headers"]
                                      if name.lower() not in (b"accept-encoding", b"range", b"if-range")]}
        start: Message | None = None
        body: list[bytes] = []

        async def edited(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            whole = b"".join(body)
            headers = MutableHeaders(scope=start)
            if "etag" in headers:
                headers["etag"] = _edited_tag(headers["etag"])
            if start["status"] == 200 and "content-encoding" not in headers:
                whole = self.edit(whole, headers.get("content-type", ""))
                headers["content-length"] = str(len(whole))
                del headers["accept-ranges"]
            await send(start)
            await send({"type": "http.response.body", "body": whole})

        await self.app(scope, receive, edited)


EDITED = "-edited"


def _edited_tag(tag: str) -> str:
    return tag[:-1] + EDITED + '"' if tag.endswith('"') else tag + EDITED


def _as_for_the_file(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A revalidation's tags as the file's own."""
    if name.lower() == b"if-none-match":
        return name, value.replace(f'{EDITED}"'.encode(), b'"')
    return name, value
