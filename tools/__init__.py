"""Tools the model calls that run here, above the engines (which know nothing of them): the
built-in ones (builtin.py: a calculator, the time), how one call runs (toolbox.py), with its work
off the event loop in a bounded child process (bounded_work.py), the loop that runs a reply's calls
and has the model go on with their results (agent_loop.py), the MCP servers' (mcp_servers.py),
every tool that may run (catalog.py: the app makes one ToolCatalog and hands it on), and which of
them a chat runs (settings.py)."""

from .agent_loop import DENIED, STEP_LIMIT, Approval, ApprovalAsked, StepLimitReached, ToolsRunning, reply_with_tools, stream_reply_with_tools
from .builtin import BUILTIN_TOOLS
from .catalog import ToolCatalog
from .mcp_servers import McpServers
from .settings import ToolSettings
from .toolbox import Tool, ToolResult, run_call

__all__ = ["BUILTIN_TOOLS", "DENIED", "STEP_LIMIT", "Approval", "ApprovalAsked", "McpServers", "StepLimitReached", "Tool", "ToolCatalog", "ToolResult",
           "ToolSettings", "ToolsRunning", "reply_with_tools", "run_call", "stream_reply_with_tools"]
