"""Serving the page (and, later, the API) over one shared model slot."""

from __future__ import annotations

import argparse
from typing import Any


def serve_web(settings: dict[str, Any], args: argparse.Namespace) -> None:
    """Load the model with progress in the terminal, then serve the page until interrupted."""
    from engines import ModelSlot
    from webui import launch

    slot = ModelSlot()
    print(f"Loading {settings.get('model_name_or_path') or 'the embedded default model'}…", flush=True)
    slot.load(settings, progress=lambda fraction, message: print(f"  {fraction:4.0%} {message}", flush=True))
    print(slot.describe(), flush=True)
    try:
        launch(slot, args.host, args.port, auth=parse_auth(args.auth))
    finally:
        slot.unload()


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    if auth is None:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise SystemExit("--auth must be user:pass, both non-empty.")
    return user, password


def serve_api(settings: dict[str, Any], args: argparse.Namespace) -> None:
    raise SystemExit("The API is not built yet; use `python app.py chat` for the terminal chat.")
