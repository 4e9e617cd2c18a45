"""A span per API request, where the operator turns traces on (engines/reply_traces.py says how,
and makes the replies' spans under these). Imported only then: it imports opentelemetry."""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engines import LoadedModels

from .errors import API_PREFIX, METRICS_PATH
from .metrics import route_name


class RequestTraces:
    """ASGI middleware making a server span of each request to /v1 and /metrics (the page's own
    requests, many a second while it is open, are left out), named by its route as declared;
    a client's ``traceparent`` header makes it a child of the client's span."""

    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path.startswith(API_PREFIX) or path == METRICS_PATH):
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        span = self.tracer.start_span(f"{method} {path}", context=propagate.extract(headers), kind=SpanKind.SERVER,
                                      attributes={"http.request.method": method, "url.path": path})
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            # Current while the request is answered: the replies' spans (made where it asks the model) go under it.
            with trace.use_span(span):
                await self.app(scope, receive, sent)
        finally:
            route = route_name(scope)
            span.update_name(f"{method} {route}")
            span.set_attributes({"http.route": route, "http.response.status_code": status})
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()


def add_traces(app: FastAPI, loaded_models: LoadedModels, tracer: Tracer) -> None:
    """Trace ``app``'s API requests and the replies of ``loaded_models``'s models with ``tracer``."""
    loaded_models.tracer = tracer
    app.add_middleware(RequestTraces, tracer=tracer)
