"""A Hugging Face cache laid out as huggingface_hub writes it, for tests that cannot download."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_model(cache: Path, repo_id: str, source: Path, ref: str | None = "main", repo_type: str = "model") -> Path:
    """Put the files of folder ``source`` into ``cache`` as revision ``ref`` of ``repo_id``; returns
    the snapshot folder. Each blob links to its source file, so nothing large is copied."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(source.iterdir()):
        blob = repo / "blobs" / hashlib.sha256(f"{commit}/{file.name}".encode()).hexdigest()
        blob.symlink_to(file.resolve())
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot
