"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the embedded
GGUF, as a remote server for tests: one request at a time, as it serves them, writing what it
does (a client that left, each generation's count of tokens) to its log."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from engines.model_files.paths import default_gguf
from harness.server_process import ServerProcess

MODEL = "SmolLM2-135M-Instruct"
# llama.cpp's count of the tokens a generation decoded, printed as each ends (verbose).
DECODED = re.compile(r"^\s*llama_perf_context_print:\s+eval time =.*/\s+(\d+) runs", re.M)


class LlamaCppServer(ServerProcess):
    """``python -m llama_cpp.server`` on the embedded model, served as MODEL, taking ``key``."""

    def __init__(self, log_path: Path, key: str) -> None:
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf()), "--model_alias", MODEL,
                   "--host", "127.0.0.1", "--api_key", key, "--n_ctx", "2048", "--verbose", "true"]
        super().__init__(log_path, key, command, {"OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"})

    def decoded(self) -> list[int]:
        """The tokens each generation so far decoded, by llama.cpp's own count."""
        return [int(runs) for runs in DECODED.findall(self.log())]
