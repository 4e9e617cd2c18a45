"""A FastAPI app served by uvicorn on a thread, for tests and benchmarks that need a real server
in their own process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

# A page's open event streams would hold a graceful shutdown until the join in serving() gives up.
QUIET = {"log_level": "warning", "timeout_graceful_shutdown": 2}


@contextmanager
def running_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free localhost port in a thread; yields the base URL."""
    with serving(uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, **QUIET))) as url:
        yield url


@contextmanager
def serving(server: uvicorn.Server) -> Iterator[str]:
    """Run ``server`` in a thread until the block ends; yields its base URL once it listens."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
