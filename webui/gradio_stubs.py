"""Gradio without its stub writer: imported before gradio is, so that every start is seconds shorter.

Each time gradio is imported, its component metaclass (``gradio.component_meta``) parses the
source file of every component class with ``ast``, renders a Jinja template of its events and
compares it with the ``.pyi`` stub beside it, writing the stub where it differs. The stubs are
for editors working on gradio itself; a running app never reads them, and this took 3-4 s of every
start of the app (and of every process of the tests) on a 2-core machine, more than the model's
load. The hook below replaces that one function with a no-op as the module is first executed. Were
gradio to rename it, the hook would set an unused name and gradio would run as it does without it
(tests/test_gradio_stubs.py then fails, to say so).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_MODULE = "gradio.component_meta"


def _write_no_stub(*_args, **_kwargs) -> None:
    """What ``create_or_modify_pyi`` becomes."""


class _StubWriterOff(importlib.abc.MetaPathFinder):
    """Finds ``gradio.component_meta`` as Python would, and turns off its stub writer once it has run."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module) -> None:
            execute(module)
            module.create_or_modify_pyi = _write_no_stub

        spec.loader.exec_module = exec_module
        return spec


def turn_off_stub_writer() -> None:
    """Installs the hook, once, if gradio is not yet imported (after, its components are defined)."""
    if _MODULE not in sys.modules and not any(isinstance(finder, _StubWriterOff) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubWriterOff())
