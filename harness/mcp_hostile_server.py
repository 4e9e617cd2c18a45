"""An MCP server that sends what no honest one does, for the tests of the limits on what a server
may send (tools/tool_limits.py): JSON-RPC written by hand, over stdio or, with ``--http
PORT``, as JSON bodies over HTTP, so that nothing of the SDK's own server bounds it.

Its tools: ``dump`` answers with ``characters`` x's in one message (40 MB: a line of 40 MB), and
``turn`` says its tool list changed and from then on lists it as ``mode`` says: ``plain`` (its
two tools), ``endless`` (a page after every page, each with one tool more), ``crowd`` (20,000
tools), ``bulky`` (40 tools of 40 KB each) or ``stall`` (never answers a listing).
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PLAIN_TOOLS = [
    {"name": "dump", "description": "Answer with this many x's.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"characters": {"type": "integer"}}, "required": ["characters"]}},
    {"name": "turn", "description": "List the tools as this mode says from now on.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"mode": {"enum": ["plain", "endless", "crowd", "bulky", "stall"]}}, "required": ["mode"]}},
]
mode = "plain"


def numbered(count: int, description: str = "One of many.") -> list[dict[str, Any]]:
    return [{"name": f"tool_{n}", "description": description, "inputSchema": {"type": "object"}} for n in range(count)]


def tool_page(cursor: str | None) -> dict[str, Any] | None:
    """The page of the tool list after ``cursor``, as the mode lists it; None: no answer."""
    if mode == "endless":
        page = int(cursor or 0)
        return {"tools": (PLAIN_TOOLS if page == 0 else []) + numbered(page + 1)[page:], "nextCursor": str(page + 1)}
    return {"plain": {"tools": PLAIN_TOOLS}, "crowd": {"tools": PLAIN_TOOLS + numbered(20_000)},
            "bulky": {"tools": PLAIN_TOOLS + numbered(40, "x" * 40 * 2**10)}, "stall": None}[mode]


def answer(message: dict[str, Any], notify: Any) -> dict[str, Any] | None:
    """The answer to ``message`` (None for a notification, or a listing it stalls); ``notify``
    sends a notification first."""
    global mode
    if "id" not in message:
        return None
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {"listChanged": True}},
                  "serverInfo": {"name": "hostile", "version": "1"}}
    elif method == "tools/list":
        result = tool_page(params.get("cursor"))
        if result is None:
            return None
    elif method == "tools/call" and params["name"] == "dump":
        result = {"content": [{"type": "text", "text": "x" * params["arguments"]["characters"]}]}
    elif method == "tools/call" and params["name"] == "turn":
        mode = params["arguments"]["mode"]
        notify({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = {"content": [{"type": "text", "text": f"turned {mode}"}]}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def write_line(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def serve_stdio() -> None:
    for line in sys.stdin.buffer:
        reply = answer(json.loads(line), write_line)
        if reply is not None:
            write_line(reply)


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, *_: Any) -> None:
        pass  # a client that stops reading a body past its size resets the connection: expected here


class JsonOverHttp(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        reply = answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))), lambda _: None)
        body = json.dumps(reply).encode() if reply is not None else b""
        self.send_response(200 if reply is not None else 202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_error(405)  # no stream of the server's own messages

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


if __name__ == "__main__":
    if "--http" in sys.argv:
        QuietServer(("127.0.0.1", int(sys.argv[sys.argv.index("--http") + 1])), JsonOverHttp).serve_forever()
    else:
        serve_stdio()
