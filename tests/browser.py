"""Helpers for the browser tests: the real app in a subprocess, Debian's Chromium through Playwright."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppProcess:
    """``python app.py --port N [extra_args]`` (the default model unless they name one), until
    stopped. Its output goes to a file: a pipe nobody reads would fill up and block the server."""

    def __init__(self, temp_dir: Path, extra_args: tuple[str, ...] = (), timeout: float = 300) -> None:
        self.port = free_port()
        self.log_path = temp_dir / "app.log"
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False",
            "OMP_WAIT_POLICY": "PASSIVE", "GRADIO_TEMP_DIR": str(temp_dir / "gradio"), "PYTHONUNBUFFERED": "1",
        }
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(self.port), *extra_args], cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.url = self._wait_for_url(timeout)

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"The app exited with {self.process.returncode}:\n{self.log()}")
            if match := re.search(r"Running on local URL:\s+(\S+)", self.log()):
                return match.group(1).rstrip("/") + "/"
            time.sleep(0.5)
        raise TimeoutError(f"The app did not start in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@contextmanager
def chromium(timeout_ms: int) -> Iterator:
    """Debian's Chromium through Playwright, with ``expect`` waiting up to ``timeout_ms``."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        expect.set_options(timeout=timeout_ms)
        try:
            yield browser
        finally:
            browser.close()


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob", "about") or parsed.hostname in LOCAL_HOSTS
