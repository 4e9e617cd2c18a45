"""A real MCP server for the tests and benchmarks (the SDK's own MCPServer), over stdio, or
Streamable HTTP with ``--http PORT``: tools that read (add, an HTTP request's header), write (write_note), take long (wait),
die mid-call (crash), add a tool of their own (grow) and say so, and take an argument whose
schema's pattern backtracks (spell_a: ``^(a|a)*$`` on aaa…b takes twice as long for each a
more) (harness/mcp_config.py names it in a config)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

server = MCPServer("demo")
notes: list[str] = []


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def write_note(text: str) -> str:
    """Keep a note."""
    notes.append(text)
    return f"noted ({len(notes)} notes)"


@server.tool()
async def wait(seconds: float) -> str:
    """Wait this many seconds."""
    await asyncio.sleep(seconds)
    return "waited"


@server.tool()
def crash() -> str:
    """End this server's process at once."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def header(name: str, ctx: Context) -> str:
    """The HTTP request's header of this name (over Streamable HTTP)."""
    request = ctx.request_context.request
    return request.headers.get(name, "(none)") if request is not None else "(not HTTP)"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def spell_a(word: Annotated[str, Field(pattern="^(a|a)*$")]) -> str:
    """Say a word made of the letter a."""
    return word


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named hello."""
    server.add_tool(lambda: "hello there", name="hello", description="Say hello.")
    await ctx.notify_tools_changed()
    return "grown"


if __name__ == "__main__":
    if "--http" in sys.argv:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run("stdio")
