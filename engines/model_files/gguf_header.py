"""A GGUF file's metadata, the fields asked for and nothing else: the header is walked once and
every other value skipped without being decoded.

gguf-py's GGUFReader decodes every field, the vocabulary's tens of thousands of strings included,
through numpy views one element at a time: 1.5-3 s for a small model's header, where this takes
tens of milliseconds. The layout is GGUF's (versions 2 and 3, either byte order): magic, version,
tensor count, field count, then each field as its key, its type and its value.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# struct formats of the fixed-size value types, by GGUF's type numbers.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SIZES = {code: struct.calcsize("<" + code) for code in _SCALARS.values()}


class _NotGguf(Exception):
    pass


def read_fields(path: Path, wanted: tuple[str, ...] | Callable[[str], bool]) -> dict[str, Any] | None:
    """The metadata fields of a GGUF file that are ``wanted`` (names, or a test of a name): numbers,
    strings, and lists of them. None where ``path`` is no GGUF file this reader knows."""
    if not path.is_file():
        raise ModelLoadError(f"{path} does not exist.")
    keep = wanted if callable(wanted) else wanted.__contains__
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _Header(data).fields(keep)
    except (_NotGguf, ValueError, struct.error, UnicodeDecodeError, OverflowError):
        return None


class _Header:
    def __init__(self, data: mmap.mmap) -> None:
        if data[:4] != _MAGIC:
            raise _NotGguf
        self._data = data
        version = struct.unpack_from("<I", data, 4)[0]
        # A big-endian file's version reads as a huge number in little-endian order.
        self._order = "<" if version & 0xFFFF else ">"
        if struct.unpack_from(self._order + "I", data, 4)[0] not in (2, 3):
            raise _NotGguf
        self._count = struct.unpack_from(self._order + "Q", data, 16)[0]
        self._at = 24

    def fields(self, keep: Callable[[str], bool]) -> dict[str, Any]:
        found = {}
        for _ in range(self._count):
            key = self._string()
            kind = self._unpack("I")
            if keep(key):
                found[key] = self._value(kind)
            else:
                self._skip(kind)
        return found

    def _unpack(self, code: str) -> Any:
        value = struct.unpack_from(self._order + code, self._data, self._at)[0]
        self._at += _SIZES[code]
        return value

    def _string(self) -> str:
        length = self._unpack("Q")
        if self._at + length > len(self._data):
            raise _NotGguf
        text = self._data[self._at:self._at + length].decode("utf-8")
        self._at += length
        return text

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            element, count = self._unpack("I"), self._unpack("Q")
            if element in _SCALARS:
                values = struct.unpack_from(f"{self._order}{count}{_SCALARS[element]}", self._data, self._at)
                self._at += count * _SIZES[_SCALARS[element]]
                return list(values)
            return [self._value(element) for _ in range(count)]
        if kind in _SCALARS:
            return self._unpack(_SCALARS[kind])
        raise _NotGguf

    def _skip(self, kind: int) -> None:
        if kind == _STRING:
            length = self._unpack("Q")  # read before self._at is: reading it moves self._at
            self._at += length
        elif kind == _ARRAY:
            element, count = self._unpack("I"), self._unpack("Q")
            if element in _SCALARS:
                self._at += count * _SIZES[_SCALARS[element]]
            else:
                for _ in range(count):
                    self._skip(element)
        elif kind in _SCALARS:
            self._at += _SIZES[_SCALARS[kind]]
        else:
            raise _NotGguf


@dataclass(frozen=True)
class GgufModel:
    """What a GGUF text model's header says of its shape: enough to size its context and KV cache
    and to pair it with a projector, before llama.cpp opens it."""

    architecture: str
    context_length: int | None
    embedding_width: int | None
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    # llama.cpp's llama_ftype: the type most of its weights are (None where the header does not say).
    file_type: int | None = None

    @classmethod
    def read(cls, path: Path) -> GgufModel:
        fields = read_fields(path, lambda key: key in ("general.architecture", "general.file_type")
                             or "." in key and not key.startswith(("tokenizer.", "general.")))
        architecture = (fields or {}).get("general.architecture")
        if not architecture:
            raise ModelLoadError(f"{path} is not a GGUF model file that can be read (no architecture in its header).")
        field = lambda name: fields.get(f"{architecture}.{name}")  # noqa: E731
        # Some architectures give a count per layer; the largest sizes the cache.
        most = lambda value: max(value) if isinstance(value, list) else value  # noqa: E731
        width = field("embedding_length")
        heads = most(field("attention.head_count")) or 1
        return cls(architecture, field("context_length"), width, field("block_count") or 1, heads,
                   most(field("attention.head_count_kv")) or heads, field("attention.key_length") or (width or heads) // heads,
                   fields.get("general.file_type"))
