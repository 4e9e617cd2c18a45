"""Gradio imported without what a running page never uses: installed before gradio is imported,
so that every start is seconds shorter.

- **Its stub writer.** Each time gradio is imported, its component metaclass
  (``gradio.component_meta``) parses the source file of every component class with ``ast``,
  renders a Jinja template of its events and compares it with the ``.pyi`` stub beside it, writing
  the stub where it differs. The stubs are for editors working on gradio itself; a running app
  never reads them, and this took 3-4 s of every start of the app (and of every process of the
  tests) on a 2-core machine, more than the model's load. ``create_or_modify_pyi`` becomes a no-op.
- **The MCP SDK for its MCP server.** ``gradio.mcp`` imports the ``mcp`` package in the body of
  its ``GradioMCPServer`` class (about 1 s on this machine), which serves a Blocks as an MCP server
  only when launched with ``mcp_server=True``; this page never is, and its own MCP tool servers
  (tools/mcp_servers.py) import the SDK when one is connected. The class body runs without
  it; the class imports it on its first instance, as it would have at import.

Were gradio to rename either, the hook would set an unused name or find the SDK already there, and
gradio would run as it does without it (tests/test_gradio_import.py then fails, to say so).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType

_STUB_WRITER = "gradio.component_meta"
_MCP_SERVER = "gradio.mcp"
# What GradioMCPServer's class body imports, as (module, name): it reads them as class attributes.
_MCP_SERVER_NAMES = (
    ("mcp", "types"),
    ("mcp.server", "Server"),
    ("mcp.server.lowlevel.helper_types", "ReadResourceContents"),
    ("mcp.server.sse", "SseServerTransport"),
    ("mcp.server.streamable_http_manager", "StreamableHTTPSessionManager"),
)


def _write_no_stub(*_args, **_kwargs) -> None:
    """What ``create_or_modify_pyi`` becomes."""


class _NoMCPSDK(importlib.abc.MetaPathFinder):
    """While gradio.mcp's body runs: the SDK, not yet imported, is not found (the class body takes that)."""

    def find_spec(self, name, path, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r} while gradio.mcp is imported", name=name)
        return None


def _without_stub_writer(module: ModuleType, execute: Callable[[ModuleType], None]) -> None:
    execute(module)
    module.create_or_modify_pyi = _write_no_stub


def _with_mcp_sdk_on_first_use(module: ModuleType, execute: Callable[[ModuleType], None]) -> None:
    hidden = _NoMCPSDK()
    sys.meta_path.insert(0, hidden)
    try:
        execute(module)
    finally:
        sys.meta_path.remove(hidden)
    server = module.GradioMCPServer
    built = server.__init__

    def __init__(self, *args, **kwargs) -> None:
        for module_name, name in _MCP_SERVER_NAMES:
            if not hasattr(server, name):
                setattr(server, name, getattr(importlib.import_module(module_name), name))
        built(self, *args, **kwargs)

    server.__init__ = __init__


_CHANGES = {_STUB_WRITER: _without_stub_writer, _MCP_SERVER: _with_mcp_sdk_on_first_use}


class _LeanGradio(importlib.abc.MetaPathFinder):
    """Finds the modules in ``_CHANGES`` as Python would, and changes each as it is first executed."""

    def find_spec(self, name, path, target=None):
        change = _CHANGES.get(name)
        if change is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module
        spec.loader.exec_module = lambda module: change(module, execute)
        return spec


def lean_gradio() -> None:
    """Installs the hook, once, if gradio is not yet imported (after, it would change nothing)."""
    if "gradio" not in sys.modules and not any(isinstance(finder, _LeanGradio) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LeanGradio())
