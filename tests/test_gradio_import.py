"""Gradio is imported without what a running page never uses (webui/gradio_patches/gradio_import.py): its stub
writer, which parsed every component's source at each import (3-4 s of every start of the app
here), and the MCP SDK its MCP server class imports (about 1 s), imported on that class's first use."""

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
STUB_PROBE = """
    import ast
    {first}
    import gradio

    def parse(*args, **kwargs):
        raise SystemExit("gradio parsed a component's source to write its stub")

    ast.parse = parse

    class Probe(gradio.Textbox):
        pass

    print("defined")
"""

# Whether importing gradio imported the MCP SDK; which of the SDK's names gradio's MCP server class
# holds before and after its first instance; and what making that instance over a Blocks of one
# function gave (its tools, or the error: gradio 6.31's server does not run on mcp 2, with or without the hook).
MCP_PROBE = """
    import sys
    {first}
    import gradio

    NAMES = ("types", "Server", "ReadResourceContents", "SseServerTransport", "StreamableHTTPSessionManager")
    server_class = gradio.mcp.GradioMCPServer
    print("sdk imported" if "mcp" in sys.modules else "no sdk")
    print("before:", [name for name in NAMES if hasattr(server_class, name)])
    with gradio.Blocks() as demo:
        box = gradio.Textbox()
        box.submit(str.upper, box, box)
    try:
        print("tools:", sorted(server_class(demo).tool_to_endpoint))
    except Exception as error:
        print("failed:", repr(error))
    print("after:", [name for name in NAMES if hasattr(server_class, name)])
"""


def run_probe(tmp_path, probe: str, first: str) -> subprocess.CompletedProcess:
    path = tmp_path / "probe.py"
    path.write_text(textwrap.dedent(probe).format(first=first))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_page_imports_gradio_without_its_stub_writer(tmp_path):
    done = run_probe(tmp_path, STUB_PROBE, "import webui")
    assert done.stdout.strip() == "defined", done.stderr[-3000:]
    assert not (tmp_path / "probe.pyi").exists()


def test_the_probe_sees_the_stub_writer_where_it_runs(tmp_path):
    """Without the page's import first, gradio's stub writer runs, and the probe says so."""
    done = run_probe(tmp_path, STUB_PROBE, "")
    assert done.returncode != 0 and "parsed a component's source" in done.stderr, done.stderr[-3000:]


def test_the_mcp_sdk_is_imported_only_when_gradio_serves_mcp(tmp_path):
    """Without the page's import first, importing gradio imports the SDK; after it, not until
    gradio's MCP server is made, which then holds the SDK's names and fares as it does without."""
    lean, plain = (run_probe(tmp_path, MCP_PROBE, first).stdout.splitlines() for first in ("import webui", ""))
    names = "['types', 'Server', 'ReadResourceContents', 'SseServerTransport', 'StreamableHTTPSessionManager']"
    assert lean[:2] == ["no sdk", "before: []"], lean
    assert plain[:2] == ["sdk imported", f"before: {names}"], plain
    assert lean[2:] == plain[2:] and lean[3] == f"after: {names}", (lean, plain)
