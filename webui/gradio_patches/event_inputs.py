"""An event sent with fewer values than its inputs, refused as it joins the queue, in a line that
says so. Gradio's own answer lists every value the request sent: a whole request (up to 8 MB)
echoed back and written to the server's log, for a request any client can send by hand."""

from __future__ import annotations

from typing import Any


def refuse_events_short_of_inputs(demo: Any) -> None:
    """``demo``: a queued gr.Blocks, every event of which joins through Queue.push."""
    queue = demo._queue
    push = queue.push

    async def checked_push(body: Any, request: Any, username: str | None) -> tuple[bool, Any, str]:
        fn = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        if fn is not None and isinstance(body.data, list) and len(body.data) < len(fn.inputs):
            sent = len(body.data)
            return False, (f"This request sends {sent} value{'' if sent == 1 else 's'} to an event of the page that takes "
                           f"{len(fn.inputs)}: reload the page."), "error"
        return await push(body=body, request=request, username=username)

    queue.push = checked_push
