"""Every tool that may run here, by name: the built-in ones, and those of the MCP servers the
operator connected (app.py, ``--mcp-config``), which come and go as the servers do. The app
makes one catalog, connects the servers to it and closes it as it ends (app.py: main), and hands
it to what runs tools: the page (webui/layout.py: build_demo) and the terminal chat. A chat's
ToolSettings names its tools from it, and the page offers what is in it when it loads."""

from __future__ import annotations

from .builtin import BUILTIN_TOOLS
from .mcp_servers import McpServers, ServerStatus
from .toolbox import Tool


class ToolCatalog:
    def __init__(self) -> None:
        self.servers: McpServers | None = None

    def tools(self) -> dict[str, Tool]:
        return {**BUILTIN_TOOLS, **(self.servers.tools() if self.servers else {})}

    def server_statuses(self) -> list[ServerStatus]:
        return self.servers.statuses() if self.servers else []

    def choose(self, names: list[str]) -> dict[str, Tool]:
        """The tools ``names`` names; a ValueError that says why for a name that runs no tool now."""
        tools = self.tools()
        missing = [self._missing(name) for name in names if name not in tools]
        if missing:
            raise ValueError(f"names no tool here: {', '.join(missing)} (the tools: {', '.join(tools)})")
        return {name: tools[name] for name in names}

    def _missing(self, name: str) -> str:
        """``name``, and why it runs no tool where it is of a server's."""
        why = self.servers.why_missing(name) if self.servers else None
        return f"{name} ({why})" if why else name

    def connect(self, servers: McpServers) -> None:
        """Offer ``servers``' tools from now on (one config at a time)."""
        self.servers = servers

    def close(self) -> None:
        """Close the servers' sessions and end the processes they started."""
        servers, self.servers = self.servers, None
        if servers is not None:
            servers.close()

