"""The page's files on the server (Gradio's upload folder, GRADIO_TEMP_DIR: uploads, imported
media, exports and the copies Gradio makes of them), kept within a lifetime and a total size.

Gradio's own ``delete_cache`` is not used: it deletes only the files this process made (an
earlier run's stay if it did not stop cleanly), deletes them all whenever the server stops (every
saved chat's media would be lost at each restart), and bounds no size. Files are aged by their ctime, as
Gradio ages them: Gradio touches a cached copy when it hands it out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# How often the folder is swept at most. Between two sweeps the cache can outgrow its size by
# what is uploaded meanwhile.
SWEEP_SECONDS = 15.0


@dataclass(frozen=True)
class FileCache:
    """``folder`` kept to files younger than ``max_age`` seconds, ``max_size`` bytes in all
    (beyond it the oldest go first)."""

    folder: Path
    max_age: float
    max_size: int

    def sweep(self) -> list[Path]:
        """Delete what is too old, then the oldest files while the rest is too large, then the
        folders left empty; the files deleted."""
        now = time.time()
        files = sorted(self._files())
        total = sum(size for _, size, _ in files)
        deleted = []
        for changed, size, path in files:
            if now - changed <= self.max_age and total <= self.max_size:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                deleted.append(path)
            total -= size
        self._remove_empty_folders(now)
        return deleted

    def _files(self) -> list[tuple[float, int, Path]]:
        """(ctime, size, path) of every file under the folder."""
        found = []
        for folder, _, names in os.walk(self.folder):
            for name in names:
                path = Path(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    status = path.lstat()
                    found.append((status.st_ctime, status.st_size, path))
        return found

    def _remove_empty_folders(self, now: float) -> None:
        """Folders empty for a sweep or more (Gradio makes a folder and then writes into it: one
        just made is left alone), and those that held only such folders."""
        removed: set[str] = set()
        for folder, subfolders, names in os.walk(self.folder, topdown=False):
            path = Path(folder)
            if path == self.folder or names:
                continue
            with contextlib.suppress(OSError):  # not empty after all, gone, or filled meanwhile
                if subfolders:
                    emptied = all(os.path.join(folder, name) in removed for name in subfolders)
                else:
                    emptied = now - path.stat().st_mtime > self.every
                if emptied:
                    path.rmdir()
                    removed.add(folder)

    @property
    def every(self) -> float:
        """Seconds between sweeps: at least two in a file's lifetime."""
        return min(SWEEP_SECONDS, self.max_age / 2)

    @contextlib.asynccontextmanager
    async def kept(self, app: Any) -> AsyncIterator[None]:
        """A lifespan for the page's app: sweeps, off the event loop, while the server runs."""
        task = asyncio.create_task(self._sweep_forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sweep_forever(self) -> None:
        while True:
            try:
                deleted = await asyncio.to_thread(self.sweep)
            except OSError as error:  # the folder itself unreadable: said, and tried again
                logger.warning("Could not sweep the page's files in %s: %s", self.folder, error)
            else:
                if deleted:
                    logger.info("Deleted %d of the page's files (older than %d s, or over the cache's size).", len(deleted), self.max_age)
            await asyncio.sleep(self.every)
