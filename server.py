"""Serving the page (and, later, the API) over one shared model slot."""

from __future__ import annotations

import argparse
from typing import Any


def serve_web(settings: dict[str, Any], args: argparse.Namespace) -> None:
    raise SystemExit("The web page is not built yet; use `python app.py chat` for the terminal chat.")


def serve_api(settings: dict[str, Any], args: argparse.Namespace) -> None:
    raise SystemExit("The API is not built yet; use `python app.py chat` for the terminal chat.")
