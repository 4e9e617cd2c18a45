"""An OpenAI-compatible server that tests and benchmarks start on the embedded model (`vllm serve`,
llama-cpp-python's own server): a process group of its own, its output in a log file, waited for
until it answers and stopped whatever state it is in (at the end of its ``with``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from harness.browser import free_port


class ServerProcess:
    """``command`` (given the port it listens on) run until stopped; ready once GET ``ready_path``
    answers 200 with ``key``."""

    ready_path = "/v1/models"
    started_within = 300.0

    def __init__(self, log_path: Path, key: str, command: list[str], environment: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.process = subprocess.Popen([*command, "--port", str(self.port)], env={**os.environ, **environment},
                                        stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait(self.started_within)
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout: float) -> None:
        name = type(self).__name__
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + self.ready_path, headers={"Authorization": f"Bearer {self.key}"}, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not start in {timeout} s:\n{self.log()[-3000:]}")

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self._log.close()
