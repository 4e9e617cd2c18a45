"""Gradio is imported without its stub writer (webui/gradio_stubs.py), which parsed every component's
source at each import: 3-4 s of every start of the app here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # each a fresh interpreter importing gradio

# A component class defined after gradio is imported, as gradio's own are while it is imported: the
# stub writer would parse this file (ast.parse, made to fail here) and write a .pyi beside it.
PROBE = textwrap.dedent("""
    import ast
    {first}
    import gradio

    def parse(*args, **kwargs):
        raise SystemExit("gradio parsed a component's source to write its stub")

    ast.parse = parse

    class Probe(gradio.Textbox):
        pass

    print("defined")
""")


def define_a_component(tmp_path, first: str) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE.format(first=first))
    return subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_page_imports_gradio_without_its_stub_writer(tmp_path):
    done = define_a_component(tmp_path, "import webui")
    assert done.stdout.strip() == "defined", done.stderr[-3000:]
    assert not (tmp_path / "probe.pyi").exists()


def test_the_probe_sees_the_stub_writer_where_it_runs(tmp_path):
    """Without the page's import first, gradio's stub writer runs, and the probe says so."""
    done = define_a_component(tmp_path, "")
    assert done.returncode != 0 and "parsed a component's source" in done.stderr, done.stderr[-3000:]
