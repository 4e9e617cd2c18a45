"""The app's cache folder, and work written into it once: a writer fills a temporary folder that
is renamed into place, with a marker written last, so an interrupted write leaves nothing that
looks complete and a later call returns the finished one at once."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import Progress

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".conversion-complete"


def cache_dir() -> Path:
    """ANYCHAT_CACHE_DIR, else the user's cache directory."""
    root = os.environ.get("ANYCHAT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "anychat"
    )
    return Path(root)


def written_once(gguf_path: Path, kind: str, write: Callable, announce: str, progress: Progress | None, generation: dict | None) -> Path:
    """``kind`` of ``gguf_path`` (as ``write`` makes it) in the cache, written now unless it is there."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    target = cache_dir() / kind / f"{gguf_path.stem}-{key}"
    if (target / COMPLETE_MARKER).is_file():
        return target
    if target.exists():
        logger.warning("Removing the incomplete %s at %s and writing it again.", kind, target)
        shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    report = progress or (lambda fraction, message: logger.info(message))
    report(0.0, announce.format(name=gguf_path.name))
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        write(gguf_path, scratch, report, generation)
        (scratch / COMPLETE_MARKER).write_text(json.dumps({"source": str(gguf_path)}))
        try:
            os.rename(scratch, target)
        except OSError:
            # Another process finished the same work first; theirs is as good as ours.
            if not (target / COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(1.0, f"Wrote {target}")
    return target
