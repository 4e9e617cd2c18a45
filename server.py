"""Serving the page and the OpenAI-compatible API from one process over one shared model slot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def serve_web(settings: dict[str, Any], args: argparse.Namespace) -> None:
    """The page at / and the API at /v1, both on the one loaded model, until interrupted."""
    import gradio as gr

    from engines import ModelSlot
    from webui import PAGE_KWARGS, build_demo

    slot = ModelSlot()
    load_slot(slot, settings)
    try:
        app = api_app(slot, args)  # /v1 first: the page mounted at / takes every path added after it
        gr.mount_gradio_app(app, build_demo(slot).queue(), path="/", auth=parse_auth(args.auth), footer_links=[], show_error=True, **PAGE_KWARGS)
        run(app, args, page=True)
    finally:
        slot.unload()


def serve_api(settings: dict[str, Any], args: argparse.Namespace) -> None:
    """The OpenAI-compatible API alone (no page), for headless use."""
    from engines import ModelSlot

    slot = ModelSlot()
    load_slot(slot, settings)
    try:
        run(api_app(slot, args), args, page=False)
    finally:
        slot.unload()


def load_slot(slot, settings: dict[str, Any]) -> None:
    """Load the model into ``slot``, with its progress in the terminal."""
    print(f"Loading {settings.get('model_name_or_path') or 'the embedded default model'}…", flush=True)
    slot.load(settings, progress=lambda fraction, message: print(f"  {fraction:4.0%} {message}", flush=True))
    print(slot.describe(), flush=True)


def api_app(slot, args: argparse.Namespace):
    from fastapi import FastAPI

    from api import add_api

    return add_api(FastAPI(title="anychat", docs_url=None, redoc_url=None), slot, args.api_key, local_media_dir(args))


def run(app, args: argparse.Namespace, page: bool) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:  # listening now: say where
                url = f"http://{args.host}:{args.port}"
                if page:
                    print(f"Running on local URL:  {url}/", flush=True)
                print(f"OpenAI-compatible API on {url}/v1{' (API key required)' if args.api_key else ''}", flush=True)

    Server(uvicorn.Config(app, host=args.host, port=args.port)).run()


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    if auth is None:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise SystemExit("--auth must be user:pass, both non-empty.")
    return user, password


def local_media_dir(args: argparse.Namespace) -> Path | None:
    if args.allowed_local_media_path is None:
        return None
    folder = Path(args.allowed_local_media_path).expanduser()
    if not folder.is_dir():
        raise SystemExit(f"--allowed-local-media-path {folder} is not a folder.")
    return folder
