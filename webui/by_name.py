"""Handlers that name what they update, wired to Gradio, which takes updates keyed by component.

A handler returns (or yields, for a stream) a dict of updates keyed by output names, like
{"status": "Loaded", "message_box": gr.update(...)}; an output it leaves out keeps its value. So a
handler stays a plain function that tests read by name, and no list of outputs anywhere has to
follow the order of a handler's return values.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gradio as gr


def by_name(handler: Callable[..., Any], outputs: Mapping[str, gr.components.Component]) -> dict[str, Any]:
    """The ``fn`` and ``outputs`` of a Gradio event that runs ``handler`` and shows its updates
    in ``outputs``, the page's components by the names the handler uses."""

    def keyed(updates: Mapping[str, Any]) -> Any:
        return {outputs[name]: value for name, value in updates.items()} or gr.skip()

    if inspect.isasyncgenfunction(handler):
        @functools.wraps(handler)
        async def fn(*args: Any, **kwargs: Any) -> Any:
            # Closed with this stream (a Stop, a switch of chats), the handler is closed at once too.
            async with contextlib.aclosing(handler(*args, **kwargs)) as updates:
                async for update in updates:
                    yield keyed(update)
    elif inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def fn(*args: Any, **kwargs: Any) -> Any:
            return keyed(await handler(*args, **kwargs))
    else:
        @functools.wraps(handler)
        def fn(*args: Any, **kwargs: Any) -> Any:
            return keyed(handler(*args, **kwargs))
    return {"fn": fn, "outputs": list(outputs.values())}
