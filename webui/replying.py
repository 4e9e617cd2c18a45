"""One reply at a time in a tab, as in the chat apps people know: while a reply is written the
message box stays editable, but sending waits until the reply ends or Stop is pressed. A send
meanwhile is refused with a short note and the text stays in the box, rather than queued: a
queued message would go out after a reply its writer has not read yet, and could not be changed."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from chat.session import ChatSession

from .languages import said


def one_reply_at_a_time(handler: Callable[..., AsyncIterator[dict[str, Any]]]) -> Callable[..., AsyncIterator[dict[str, Any]]]:
    """A chat handler that refuses, leaving the page as it is (an update of nothing), while its
    session has a reply being written (two replies at once would write into the same conversation)."""

    @functools.wraps(handler)
    async def guarded(self: Any, session: ChatSession, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        if not session.reply.begin():
            gr.Warning(said("chat.busy"))
            yield {}
            return
        try:
            async for update in handler(self, session, *args, **kwargs):
                yield update
        finally:
            session.reply.end()

    return guarded


def start(session: ChatSession) -> dict[str, Any]:
    """Before a reply: show Stop, or, while a reply is written, say why nothing is sent and end
    the event chain there (the error itself stays hidden: the note says it all)."""
    if session.reply.answering:
        gr.Warning(said("chat.busy"))
        raise gr.Error(said("chat.busy"), visible=False, print_exception=False)
    return gr.update(visible=True)


def stop_button(session: ChatSession) -> Any:
    """After a reply event: Stop hidden once no reply is written. While one is (a send refused
    while a reply goes on; the edit of a document's chip, which ends at once beside the edit of
    the text that is answered), Stop is left as that reply set it: a "shown" worked out then
    could reach the page after the reply's own end, as it did under a CPU hog, and keep Stop
    shown for good."""
    return gr.skip() if session.reply.answering else gr.update(visible=False)
