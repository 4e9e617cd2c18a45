"""MCP servers (the Model Context Protocol, through its official SDK) whose tools the model may
call, from the operator's config file in the ``mcpServers`` shape other MCP clients read:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]},
        "search": {"url": "https://search.example/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A server with a ``command`` is started as a process that speaks over its stdin and stdout; one
with a ``url`` is reached over Streamable HTTP. Each is kept by a task of its own on a loop of its
own (a session lives on the loop it was opened on; the tools are called from any): it connects,
lists its tools, follows the server's word that they changed, and holds the session until the
servers are closed. A server that fails to start, hangs, dies or sends what is not MCP is marked
so with why, and the others go on. Its tools are named ``server__tool``. What a server sends is
bounded (tool_limits.py): each message as it is read (mcp_transports.py), its tool list in pages,
tools, their schemas' size and, when it changes, time; what is left out is said in its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engines.freed_memory import return_freed_memory_to_os

from .tool_limits import TOOL_LIMITS, ToolLimits
from .toolbox import Tool

T = TypeVar("T")
SEPARATOR = "__"
# OpenAI's function names (and so the chat templates'): letters, digits, _ and -, 64 at most.
NAME_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
LONGEST_NAME = 64
# How long closing waits for a server's session to end before it cuts it off.
CLOSE_SECONDS = 5
# How long the ping after a listing waits: it only frees the listing's last page sooner.
PING_SECONDS = 5


class ServerConfig(BaseModel):
    """One entry of ``mcpServers``. Keys other clients add for themselves are let be."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    command: str | None = Field(None, description="the program that runs a stdio server")
    args: list[str] = []
    env: dict[str, str] = Field({}, description="set for the server's process, over the app's own environment")
    cwd: str | None = None
    url: str | None = Field(None, description="a Streamable HTTP server's endpoint")
    headers: dict[str, str] = Field({}, description="sent with each request to a url, like an Authorization header")
    disabled: bool = False
    read_only: list[str] = Field([], alias="readOnly", description="tools the operator names as changing nothing")
    ask_first: list[str] = Field([], alias="askFirst", description="tools that ask before each call, whatever the server says of them")
    startup_seconds: float = Field(30, gt=0, alias="startupTimeout", description="how long the server may take to connect")
    call_seconds: float = Field(120, gt=0, alias="timeout", description="how long one call may take")

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either a command (a server run here, over stdio) or a url (a Streamable HTTP server), not both or neither")
        return self


def read_config(path: str | Path) -> dict[str, ServerConfig]:
    """The servers of the config file at ``path`` (those not ``disabled``); a ValueError that
    says what is wrong where the file is not such a config."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the MCP config {path}: {error.strerror or error}") from None
    try:
        servers = json.loads(text).get("mcpServers")
    except (json.JSONDecodeError, AttributeError) as error:
        raise ValueError(f"the MCP config {path} is not a JSON object: {error}") from None
    if not isinstance(servers, dict):
        raise ValueError(f'the MCP config {path} has no "mcpServers" object (like {{"mcpServers": {{"name": {{"command": ...}}}}}})')
    configs = {}
    for name, entry in servers.items():
        if not name or NAME_OUTSIDE.search(name) or SEPARATOR in name:
            raise ValueError(f"the MCP server name {name!r} in {path}: use letters, digits, - and single _ only")
        try:
            configs[name] = ServerConfig.model_validate(entry)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the entry'}: {e['msg']}" for e in error.errors())
            raise ValueError(f"the MCP server {name!r} in {path}: {problems}") from None
    return {name: config for name, config in configs.items() if not config.disabled}


@dataclass(frozen=True)
class ServerStatus:
    """What the page shows of a server: ``state`` and, where it is not ready, why."""

    name: str
    state: Literal["starting", "ready", "failed", "closed"]
    detail: str
    tools: tuple[str, ...]

    def summary(self) -> str:
        """Like "ready: add, write_note" or "failed (its command was not found: npx)"."""
        why = f" ({self.detail})" if self.detail else ""
        return f"{self.state}{why}{': ' + ', '.join(self.tools) if self.tools else ''}"


class McpServers:
    """The servers of one config, connected in the background from ``start`` until ``close``.
    ``tools()`` are theirs at the moment: those of a server not ready are not among them."""

    def __init__(self, configs: dict[str, ServerConfig], limits: ToolLimits = TOOL_LIMITS) -> None:
        self._servers = {name: _Server(name, config, limits, self._call) for name, config in configs.items()}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-servers", daemon=True)
        self._keeping: list[asyncio.Task] = []

    @classmethod
    def from_file(cls, path: str | Path) -> McpServers:
        return cls(read_config(path))

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._keep_all(), self._loop).result()

    async def _keep_all(self) -> None:
        self._keeping = [asyncio.create_task(server.keep()) for server in self._servers.values()]

    def wait_started(self, timeout: float | None = None) -> None:
        """Until each server is ready or has failed (``timeout``: the most to wait, in seconds)."""
        asyncio.run_coroutine_threadsafe(self._all_started(), self._loop).result(timeout)

    async def _all_started(self) -> None:
        await asyncio.gather(*(server.started.wait() for server in self._servers.values()))

    def tools(self) -> dict[str, Tool]:
        return {name: tool for server in self._servers.values() for name, tool in server.tools.items()}

    def statuses(self) -> list[ServerStatus]:
        return [server.status() for server in self._servers.values()]

    def why_missing(self, name: str) -> str | None:
        """Why the tool ``name`` is not among tools(), where it names one of these servers."""
        server = self._servers.get(name.split(SEPARATOR, 1)[0])
        if server is None:
            return None
        return f"its MCP server {server.name} is {server.status().summary()}"

    async def _call(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` run on the servers' loop, awaited from the caller's; cancelling the caller cancels it."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    def close(self) -> None:
        """Close every session and end every server process this started, then the loop."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _close_all(self) -> None:
        """Each session is closed in its turn; one still connecting, or slow to close, is cut off
        (its process ended all the same, as the SDK unwinds)."""
        for server in self._servers.values():
            server.closing.set()
        _, slow = await asyncio.wait(self._keeping, timeout=CLOSE_SECONDS)
        for keeping in slow:
            keeping.cancel()
        await asyncio.gather(*slow, return_exceptions=True)


class _Server:
    """One server's session, kept by ``keep`` on the servers' loop."""

    def __init__(self, name: str, config: ServerConfig, limits: ToolLimits,
                 run_on_loop: Callable[[Coroutine[Any, Any, str]], Coroutine[Any, Any, str]]) -> None:
        self.name = name
        self.config = config
        self.limits = limits
        self._run_on_loop = run_on_loop
        self.tools: dict[str, Tool] = {}
        self.state: Literal["starting", "ready", "failed", "closed"] = "starting"
        self.detail = ""
        self.client: Any = None
        # Why the transport ended the session, for the calls it cut off (they see only that it closed).
        self.refusal: str | None = None
        self.started = asyncio.Event()
        self.closing = asyncio.Event()
        self._relisting: asyncio.Task | None = None
        self._changed_while_listing = False

    def status(self) -> ServerStatus:
        return ServerStatus(self.name, self.state, self.detail, tuple(self.tools))

    async def keep(self) -> None:
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.config.startup_seconds):
                        self.client = await stack.enter_async_context(Client(self._transport(), message_handler=self._on_message))
                        await self._list_tools()
                except TimeoutError:
                    raise RuntimeError(f"it did not answer within {self.config.startup_seconds:g} s of starting") from None
                self.state = "ready"  # its detail: what _list_tools left out
                self.started.set()
                async with asyncio.TaskGroup() as watching:
                    watching.create_task(self._follow_changes())
                    await self.closing.wait()
                    raise _Closing
        except* _Closing:
            self._ended("closed", "")
        except* Exception as errors:
            self._ended("failed", _why(errors))
        finally:
            self.client = None
            if self.state == "starting":  # cut off as the servers closed
                self._ended("closed", "")
            self.started.set()

    def _ended(self, state: Literal["failed", "closed"], detail: str) -> None:
        self.tools = {}
        self.state, self.detail = state, detail

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters

        from .mcp_transports import bounded_http_client, bounded_stdio_client

        config, size = self.config, self.limits.mcp_message_size
        if config.url is not None:
            return bounded_http_client(self.name, config.url, config.headers, size)
        command = StdioServerParameters(command=config.command, args=config.args, env=config.env or None, cwd=config.cwd)
        # What the server says on stderr goes to the app's own (the process's, whatever sys.stderr is now).
        return bounded_stdio_client(self.name, command, size, self._refused, errlog=sys.__stderr__)

    def _refused(self, why: str) -> None:
        self.refusal = why

    async def _list_tools(self) -> None:
        import mcp_types
        from mcp.shared.exceptions import MCPError

        self.tools, offered, self.detail = await self._listed()
        # The SDK's session keeps each listed tool's output schema by name, and 20,000 names kept
        # among the freed pages pin +20 MiB of them: it keeps those of the tools offered only.
        schemas = self.client.session._tool_output_schemas
        for name in set(schemas) - offered:
            del schemas[name]
        # The pages, parsed, took tens of times their size (20,000 tools in 1.6 MB: +60 MiB). The
        # SDK's reader holds the last message it read until the next one comes, so a ping's answer
        # (or its refusal: the 2026 protocol has no ping) takes the last page's place; then what
        # glibc keeps freed is handed back. Together: +8 MiB after 20,000 tools, against +23.
        with contextlib.suppress(MCPError, TimeoutError):
            async with asyncio.timeout(PING_SECONDS):
                await self.client.session.send_request(mcp_types.PingRequest(), mcp_types.EmptyResult)
        return_freed_memory_to_os()

    async def _listed(self) -> tuple[dict[str, Tool], set[str], str]:
        """Its tools, within the limits' pages, tools and their schemas' size, their names as the
        server says them, and what was left out past them (the tools before them are offered)."""
        limits = self.limits
        tools: dict[str, Tool] = {}
        offered: set[str] = set()
        size, cursor, left_out = 0, None, ""
        for _ in range(limits.mcp_list_pages):
            page = await self.client.list_tools(cursor=cursor, cache_mode="bypass")  # kept here, within the limits
            for described in page.tools:
                tool = self._tool(described)
                size += len(json.dumps(tool.schema(), ensure_ascii=False).encode())
                if len(tools) == limits.mcp_tools_per_server:
                    left_out = f"it lists more than {limits.mcp_tools_per_server} tools, this app's limit (ToolLimits.mcp_tools_per_server)"
                elif size > limits.mcp_schemas_size:
                    left_out = (f"its tools' descriptions and schemas pass {limits.mcp_schemas_size / 2**20:g} MB together, this app's "
                                "limit (ToolLimits.mcp_schemas_size)")
                if left_out:
                    break
                tools[tool.name] = tool
                offered.add(described.name)
            cursor = page.next_cursor
            if left_out or cursor is None:
                break
        else:
            left_out = f"its tool list goes on past {limits.mcp_list_pages} pages, this app's limit (ToolLimits.mcp_list_pages)"
        return tools, offered, f"{left_out}: only the first {len(tools)} are offered" if left_out else ""

    async def _relist_within_time(self) -> None:
        seconds = self.limits.mcp_list_seconds
        try:
            async with asyncio.timeout(seconds):
                await self._list_tools()
        except TimeoutError:
            self.detail = (f"listing its tools again took more than {seconds:g} s, this app's limit (ToolLimits.mcp_list_seconds): "
                           "the tools listed before are offered")

    def _tool(self, described: Any) -> Tool:
        name = NAME_OUTSIDE.sub("_", f"{self.name}{SEPARATOR}{described.name}")[:LONGEST_NAME]
        hints = described.annotations
        read_only = described.name not in self.config.ask_first and (described.name in self.config.read_only or (
            hints is not None and hints.read_only_hint is True and hints.destructive_hint is not True))

        async def run(arguments: dict[str, Any]) -> str:
            return await self._run_on_loop(self._call_tool(described.name, arguments))

        return Tool(name=name, description=described.description or described.title or described.name,
                    parameters=described.input_schema or {"type": "object"}, run=run, read_only=read_only)

    async def _call_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        if self.client is None:
            raise RuntimeError(f"the MCP server {self.name} is {self.state}{f': {self.detail}' if self.detail else ''}")
        try:
            result = await asyncio.wait_for(self.client.call_tool(tool, arguments), self.config.call_seconds)
        except TimeoutError:
            raise RuntimeError(f"the MCP server {self.name} did not answer within {self.config.call_seconds:g} s") from None
        except ValidationError as error:
            raise RuntimeError(f"the MCP server {self.name} answered with what is not an MCP result: {_first_line(error)}") from None
        except Exception:
            if self.refusal is not None:
                raise RuntimeError(self.refusal) from None
            raise
        text = result_text(result)
        if result.is_error:
            raise RuntimeError(text or f"{tool} failed and said nothing")
        return text

    async def _on_message(self, message: Any) -> None:
        """A server of the 2025 protocol says its tools changed by a notification."""
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist()

    async def _follow_changes(self) -> None:
        """A server of the 2026 protocol says its tools changed on a stream it is asked to open."""
        from mcp.client.subscriptions import ListenNotSupportedError

        capabilities = self.client.server_capabilities.tools
        if capabilities is None or not capabilities.list_changed:
            return
        with contextlib.suppress(ListenNotSupportedError):
            async with self.client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._relist()

    def _relist(self) -> None:
        """List the tools again. A change said while a listing runs is listed once more after it:
        that listing may have read the list from before the change."""
        if self._relisting is None or self._relisting.done():
            self._relisting = asyncio.get_running_loop().create_task(self._relist_until_current())
        else:
            self._changed_while_listing = True

    async def _relist_until_current(self) -> None:
        self._changed_while_listing = True
        while self._changed_while_listing:
            self._changed_while_listing = False
            await self._relist_within_time()


def result_text(result: Any) -> str:
    """A CallToolResult as the text the model reads: each text as it is, what is not text named."""
    parts = []
    for item in result.content:
        if item.type == "text":
            parts.append(item.text)
        elif item.type == "resource":
            resource = item.resource
            parts.append(getattr(resource, "text", None) or f"[{resource.mime_type or 'binary'} resource {resource.uri}, not text]")
        elif item.type == "resource_link":
            parts.append(f"[resource {item.uri}{f': {item.description}' if item.description else ''}]")
        else:
            parts.append(f"[{item.type}: {getattr(item, 'mime_type', '')}, not shown to the model]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class _Closing(Exception):
    """Ends a server's session when the servers are closed."""


def _why(errors: BaseExceptionGroup) -> str:
    """The first real error under the SDK's task groups, in a line."""
    error: BaseException = errors
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    if isinstance(error, FileNotFoundError):
        return f"its command was not found: {error.filename or error}"
    if type(error).__name__ == "SubscriptionLost" or str(error) == "Connection closed":
        return "the connection to it closed (did its process end? the app's log has what it said)"
    return _first_line(error) or type(error).__name__


def _first_line(error: BaseException) -> str:
    return str(error).strip().split("\n", 1)[0][:300]
