"""The media files kept with the chats: each once, by its content's SHA-256, in the data folder's
``media/`` (``<hash[:2]>/<hash>``), whatever its name and however many chats use it. The page
shows and reads a copy in its own upload folder (``shown``), made again when Gradio has
deleted that one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

CHUNK = 2**20
SHOWN_FOLDER = "anychat-store"


class MediaFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def file(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def put(self, path: str, digest: str | None = None) -> tuple[str, int]:
        """Keep the file at ``path`` (whose hash is ``digest``, where known); its hash and size.
        Written whole or not at all."""
        digest = digest or file_hash(path)[0]
        size = os.path.getsize(path)
        target = self.file(digest)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, draft = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
                    shutil.copyfileobj(source, out, CHUNK)
                os.replace(draft, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(draft)
        return digest, size

    def shown(self, digest: str, name: str, upload_folder: str) -> str:
        """A path in the page's upload folder with the medium's content, under its ``name``
        (which the page shows); the path of a file that is not there where the medium is gone."""
        target = Path(upload_folder) / SHOWN_FOLDER / digest / (os.path.basename(name) or "file")
        if not target.exists() and self.file(digest).exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, draft = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
            os.close(fd)
            shutil.copyfile(self.file(digest), draft)
            os.replace(draft, target)
        return str(target)

    def remove(self, digests: list[str]) -> None:
        for digest in digests:
            with contextlib.suppress(FileNotFoundError):
                self.file(digest).unlink()


def file_hash(path: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
