"""Freed memory handed back to the system: glibc keeps the heap pages a process frees, so an
unloaded model or a dropped MCP listing would not show in RSS (elsewhere there is nothing to do)."""

from __future__ import annotations

import ctypes


def return_freed_memory_to_os() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
