"""A Content-Security-Policy on every answer: the page fetches nothing from outside this server.

The chat renders Markdown, so a reply holding ![](https://elsewhere/?q=…) would have the browser
fetch that URL the moment it is shown, and a prompt-injected reply can put the conversation into
it. With this policy the browser refuses every fetch that is not from this server (images, media,
styles, fonts, scripts, connections, frames), no form is ever posted (the login signs in by a
script's fetch: a form a reply slipped in could only post someone else's login), and no other
site may frame the page.

What the page itself needs: Gradio's inline config script and event handlers run as inline
scripts and through the AsyncFunction constructor ('unsafe-inline', 'unsafe-eval': they do not
widen where anything is fetched from); thumbnails and players read data: and blob: URLs.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = "; ".join((
    "default-src 'self'",
    "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "media-src 'self' data: blob:",
    "font-src 'self' data:",
    "connect-src 'self' data: blob:",
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'none'",
    "frame-ancestors 'self'",
))


class ContentSecurityPolicy:
    """ASGI middleware putting POLICY on every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault("Content-Security-Policy", POLICY)
            await send(message)

        await self.app(scope, receive, with_policy)
