"""The OpenAI-compatible API (/v1) over the app's shared model slot."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from engines import ModelSlot
from limits import Limits

from .body_limit import BodyLimit
from .errors import install_error_handlers
from .routes import create_router


def add_api(app: FastAPI, slot: ModelSlot, api_key: str | None = None, local_media_dir: Path | None = None,
            max_request_size: int = Limits().max_request_size) -> FastAPI:
    """Serve /v1 on ``app``, taking request bodies of at most ``max_request_size`` bytes. Call it
    before mounting anything at "/": a mount there takes every path registered after it."""
    app.add_middleware(BodyLimit, limit=max_request_size)
    install_error_handlers(app)
    app.include_router(create_router(slot, api_key, local_media_dir))
    return app


__all__ = ["add_api"]
