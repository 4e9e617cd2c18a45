"""What Gradio 6.31 leaves undone for a page mounted into another app (gr.mount_gradio_app)
rather than launched, and the one thing of its logins the server needs to read."""

from __future__ import annotations

from typing import Any

from starlette.routing import Mount


def finish_mount(demo: Any, page: Any) -> Any:
    """Gradio's own app inside ``page`` (the app ``demo`` is mounted at the root of), made safe and
    stoppable as launch() would have made it."""
    from gradio.routes import App

    # Gradio checks that a file a request names is one its users uploaded only once launch() has
    # run; a mounted page never runs it, and would copy any file on the server that it is sent.
    demo.has_launched = True
    gradio_app = next(route.app for route in page.routes if isinstance(route, Mount) and isinstance(route.app, App))
    # Gradio's heartbeat streams (one per open page) end only when its app is told the server stops.
    page.state.page_streams_stop = gradio_app.stop_event
    return gradio_app


def gradio_login(gradio_app: Any, request: Any) -> str | None:
    """The page login a request's cookies carry, as Gradio reads them (its routes' get_current_user)."""
    cookies = request.cookies
    token = cookies.get(f"access-token-{gradio_app.cookie_id}") or cookies.get(f"access-token-unsecure-{gradio_app.cookie_id}")
    return gradio_app.tokens.get(token)
