"""An open page that waits draws no frames it does not need.

Gradio 6.31's status tracker counts the seconds an event takes in a requestAnimationFrame loop,
and the tracker of the app's first "Loading..." is taken off the page while its loop still runs:
every open page then draws 60 frames a second for as long as it stays open, on a plain Gradio app
too (5 % of a core per idle tab on this machine; 8 open tabs take 40 %). The tracker shows tenths
of a second, so its loop is run at ten frames a second: a timer shown still counts as it did, and
the loop left running costs a sixth. Any other requestAnimationFrame loop is left as it is.

The tracker keeps the requestAnimationFrame it finds as its module loads, before Gradio adds the
page's head (``head=``), so the script goes into the page's HTML, ahead of Gradio's own scripts.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The tracker's callback as Gradio 6.31 builds it: ()=>{set(elapsed,(performance.now()-get(start))/1e3),running&&loop()}.
# Where a later Gradio writes it otherwise nothing matches, every loop runs as before, and
# tests/test_browser.py, which counts an idle page's frames, says so.
STATUS_TIMER_AT_ITS_RESOLUTION = rb"""<script>
(() => {
    const frame = window.requestAnimationFrame.bind(window);
    const statusTimer = /^\(\)=>\{\w+\(\w+,\(performance\.now\(\)-\w+\(\w+\)\)\/1e3\),\w+&&\w+\(\)\}$/;
    window.requestAnimationFrame = (callback) => {
        if (statusTimer.test(String(callback))) {
            setTimeout(() => frame(callback), 100);
            return 0;
        }
        return frame(callback);
    };
})();
</script>"""


class StatusTimerAtItsResolution:
    """ASGI middleware putting STATUS_TIMER_AT_ITS_RESOLUTION first in the head of the page (the
    HTML that Gradio answers ``GET /`` with)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != "/":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def with_script(message: Message) -> None:
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
            page = b"".join(body)
            headers = MutableHeaders(scope=start)
            if headers.get("content-type", "").startswith("text/html") and "content-encoding" not in headers:
                page = page.replace(b"<head>", b"<head>" + STATUS_TIMER_AT_ITS_RESOLUTION, 1)
                headers["content-length"] = str(len(page))
            await send(start)
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, with_script)
