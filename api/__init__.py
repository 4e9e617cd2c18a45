"""The OpenAI-compatible API (/v1) over the app's loaded models, which the page shares."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI

from access import Logins
from engines import LoadedModels
from engines.context_settings import ContextPolicy
from limits import Limits
from store import ChatStore

from .auth import ApiAccess, ApiAccessCheck
from .body_limit import BodyLimit
from .errors import install_error_handlers
from .metrics import add_metrics
from .routes import create_router

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


def add_api(app: FastAPI, loaded_models: LoadedModels, api_key: str | None = None, local_media_dir: Path | None = None,
            max_request_size: int = Limits().max_request_size, logins: Logins | None = None,
            limits: Limits = Limits(), context_policy: ContextPolicy | None = None,
            store: ChatStore | None = None, tracer: Tracer | None = None) -> FastAPI:
    """Serve /v1 (and /metrics) on ``app`` to holders of ``api_key`` and users of ``logins`` (anyone, when both
    are empty; ``app.state.api_access`` says which), taking request bodies of at most
    ``max_request_size`` bytes and documents within ``limits``; ``context_policy``: what a chat
    longer than the context becomes where its request names no policy; ``store``: where documents
    too long for the context are kept to answer from their passages, and the Responses API's
    replies for later requests to go on from; ``tracer``: where the requests' and replies' spans
    go, where the operator traces (engines/reply_traces.py). Call it before mounting anything
    at "/": a mount there takes every path registered after it."""
    app.state.api_access = ApiAccess(api_key, logins)
    app.add_middleware(BodyLimit, limit=max_request_size)
    app.add_middleware(ApiAccessCheck, access=app.state.api_access)
    install_error_handlers(app)
    app.include_router(create_router(loaded_models, local_media_dir, limits, context_policy, store))
    # Last, so outermost: requests the other middleware refuse are counted too.
    add_metrics(app, loaded_models)
    if tracer is not None:
        from .traces import add_traces  # imports opentelemetry: only where traces are on

        add_traces(app, loaded_models, tracer)
    return app


__all__ = ["add_api"]
