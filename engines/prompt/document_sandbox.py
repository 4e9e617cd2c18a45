"""Documents read in a process of their own, bounded in CPU time and memory, one at a time per user.

A document's size says little about what reading it costs: a 5 KB PDF whose pages share one
3.8 MB content stream costs pypdf seconds of pure-Python work per page (hours over a thousand
pages, which no thread can be made to stop), and a 95 KB .docx of empty paragraphs builds a
1.6 GB tree. So the server reads each document (documents.read_document, in-process, the same
code) in a child process that lowers its own limits first: past ``max_document_seconds`` of CPU
time the kernel stops it, past ``max_document_memory`` its allocations fail, and the reader
answers with a MediaError naming the file and what to do. The page and the API read through
here; a user's next document waits until their last is read, so one user's files take one core
at most, and that at the lowest priority: documents sent back to back, each refused at its limit,
take only the time no reply and no other request wants.

The child's answer comes back as JSON (text only): a child that a hostile file took over could
otherwise hand the server an object to run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ..errors import MediaError
from .documents import Document, DocumentInput, DocumentLimits, read_bytes, read_document

ROOT = Path(__file__).resolve().parents[2]
# Time for the child to start and import its readers, beyond the CPU time its document may take.
START_SECONDS = 30


class SandboxLimits(DocumentLimits, Protocol):
    """The server's limits on reading one document (declared in limits.py's Limits)."""

    max_document_seconds: int
    max_document_memory: int


@dataclass(frozen=True)
class ReadingLimits:
    """The limits a child reads its document under, as values (hashable, and sent to the child as JSON)."""

    max_document_pages: int
    max_document_characters: int
    max_document_unpacked_size: int
    max_document_seconds: int
    max_document_memory: int

    @classmethod
    def of(cls, limits: SandboxLimits) -> ReadingLimits:
        return cls(limits.max_document_pages, limits.max_document_characters, limits.max_document_unpacked_size,
                   limits.max_document_seconds, limits.max_document_memory)


def read_bounded(source: DocumentInput, name: str, limits: SandboxLimits, user: str | None = None) -> Document:
    """The text of the document at path ``source`` (or in bytes ``source``), read in a child
    process within ``limits``; ``user``: whose it is, so that their documents are read one at a time."""
    data = read_bytes(source, name)
    bounds = ReadingLimits.of(limits)
    header = json.dumps({"name": name, "limits": asdict(bounds)}).encode() + b"\n"
    with _one_at_a_time(user or ""):
        try:
            child = subprocess.run([sys.executable, "-m", __name__], input=header + data, capture_output=True, cwd=ROOT,
                                   timeout=bounds.max_document_seconds + START_SECONDS)
        except subprocess.TimeoutExpired:
            raise _too_costly(name, bounds) from None
    try:
        answer = json.loads(child.stdout)
    except ValueError:
        # Stopped by the kernel (SIGXCPU past its CPU time, SIGKILL, or an abort where memory ran out).
        raise _too_costly(name, bounds) from None
    if "error" in answer:
        raise MediaError(answer["error"])
    return Document(answer["name"], answer["kind"], tuple(answer["pages"]))


def _too_costly(name: str, limits: ReadingLimits) -> MediaError:
    return MediaError(
        f"{name} takes more than this server gives to reading one document ({limits.max_document_seconds} s of CPU time, "
        f"{limits.max_document_memory / 2**20:,.0f} MB of memory: the max_document_seconds and max_document_memory settings). "
        "Its pages or paragraphs are built to be costly to read. Save its text as a new PDF or .txt and send that."
    )


_reading: set[str] = set()
_changed = threading.Condition()


@contextmanager
def _one_at_a_time(user: str) -> Iterator[None]:
    with _changed:
        _changed.wait_for(lambda: user not in _reading)
        _reading.add(user)
    try:
        yield
    finally:
        with _changed:
            _reading.discard(user)
            _changed.notify_all()


def _read_in_child() -> None:
    """The child: lower its own limits, read the document on stdin, answer in JSON on stdout."""
    import os
    import resource

    os.nice(19)
    header = json.loads(sys.stdin.buffer.readline())
    limits = ReadingLimits(**header["limits"])
    # Stopped by SIGXCPU, the child would otherwise dump the user's document to a core file.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.max_document_seconds, limits.max_document_seconds + 5))
    resource.setrlimit(resource.RLIMIT_AS, (limits.max_document_memory, limits.max_document_memory))
    data = sys.stdin.buffer.read()
    try:
        document = read_document(data, header["name"], limits)
        answer = {"name": document.name, "kind": document.kind, "pages": list(document.pages)}
    except MediaError as error:
        answer = {"error": str(error)}
    except MemoryError:
        sys.exit(1)
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    _read_in_child()
