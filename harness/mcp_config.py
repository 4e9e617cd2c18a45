"""MCP configs for the tests and benchmarks: the demo server (harness/mcp_demo_server.py) and the
hostile one (harness/mcp_hostile_server.py) as ``mcpServers`` entries, and a config file of such entries."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEMO_SERVER = Path(__file__).with_name("mcp_demo_server.py")
HOSTILE_SERVER = Path(__file__).with_name("mcp_hostile_server.py")


def demo_entry(**more: Any) -> dict[str, Any]:
    """The demo server, run over stdio by this Python, with ``more`` keys of the entry."""
    return {"command": sys.executable, "args": [str(DEMO_SERVER)], **more}


def hostile_entry(**more: Any) -> dict[str, Any]:
    """The hostile server, run over stdio by this Python, with ``more`` keys of the entry."""
    return {"command": sys.executable, "args": [str(HOSTILE_SERVER)], **more}


def write_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path
