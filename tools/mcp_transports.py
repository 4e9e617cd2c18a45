"""The MCP SDK's transports with what a server sends read within a size (ToolLimits.mcp_message_size).

Over stdio, the SDK reads a line by adding each chunk to the whole line so far and splitting it
again: quadratic in the line's length (a 40 MB result took 73 s of CPU here), and without end
for a line that never ends. The stdio transport here is the SDK's with its reader replaced by one
that keeps each line's bytes once and stops at the size: a longer line ends the server's session
with a MessageTooLarge that names the size, before more of it is read. Over Streamable HTTP the
SDK bounds each server-sent event (given the same size here) but reads a JSON response whole: its
body is read within the size, and a longer one fails its call, saying so.

Imported only where servers are configured, as the SDK is (mcp_servers.py).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.lowlevel
import httpx2
import mcp_types
from mcp.client import stdio
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage


class MessageTooLarge(RuntimeError):
    """An MCP server sent a message longer than this app reads."""

    def __init__(self, server: str, size: int) -> None:
        super().__init__(f"the MCP server {server} sent a message of more than {size / 2**20:g} MB, this app's limit for one "
                         "message from an MCP server (ToolLimits.mcp_message_size), so it was not read")


@asynccontextmanager
async def bounded_stdio_client(server: str, parameters: StdioServerParameters, size: int, refused: Callable[[str], None],
                               errlog: TextIO = sys.stderr) -> AsyncGenerator[Any, None]:
    """The SDK's ``stdio_client`` for ``parameters``, its lines read within ``size`` bytes: a longer
    one ends the session with a MessageTooLarge, said first to ``refused`` (the calls it cuts off
    see only that the session closed). Its spawning and its shutdown (stdin closed, then the
    process tree killed, every wait bounded) are the SDK's own (mcp is pinned in requirements.txt)."""
    process = await stdio._create_platform_compatible_process(command=parameters.command, args=parameters.args,
                                                              env=stdio.get_default_environment() | (parameters.env or {}),
                                                              errlog=errlog, cwd=parameters.cwd)
    # No awaits until the task group is entered: a cancellation in the gap would leak the process.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    def parsed(line: bytearray) -> SessionMessage | Exception:
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as error:  # the session surfaces it, as the SDK's reader does
            return error

    def too_large() -> None:
        error = MessageTooLarge(server, size)
        refused(str(error))
        raise error

    async def read_lines() -> None:
        line = bytearray()
        async for chunk in process.stdout:
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                if len(line) + end - start > size:
                    too_large()
                line += chunk[start:end]
                await read_stream_writer.send(parsed(line))
                line.clear()
                start = end + 1
            if len(line) + len(chunk) - start > size:
                too_large()
            line += chunk[start:]

    async def stdout_reader() -> None:
        drained = True
        try:
            async with read_stream_writer:
                try:
                    await read_lines()
                except MessageTooLarge:
                    # Not drained: the session ends, and its process with it, the rest of the line unread.
                    drained = False
                    raise
                finally:
                    if drained:  # a server flushing what it wrote is not left blocked on a full pipe, unable to exit
                        await stdio._drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session is gone, or shutdown closed stdout under the read: the session sees it closed

    async def stdin_writer() -> None:
        try:
            async with write_stream_reader:
                async for message in write_stream_reader:
                    await process.stdin.send((message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end, not a request that hangs
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(stdio._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await stdio._stop_server_process(process)
        await stdio._aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as pipes:
        pipes.start_soon(stdout_reader)
        pipes.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded, as the SDK's: a cancelled caller must not leave the server's process running.
            with anyio.CancelScope(shield=True):
                await shutdown()
            pipes.cancel_scope.cancel()


def bounded_http_client(server: str, url: str, headers: dict[str, str], size: int) -> Any:
    """The SDK's ``streamable_http_client`` for ``url``, each event and JSON body read within ``size`` bytes."""
    async def bounded(response: httpx2.Response) -> None:
        # The size counts the bytes as they come: a body compressed anyway (the client asks for
        # none) is left compressed, which no JSON parser reads, rather than unpacked past the size.
        response.headers.pop("content-encoding", None)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _BoundedBody(response.stream, server, size)

    # The SDK's own timeouts for a stream; a call's own limit is the server's config.
    client = httpx2.AsyncClient(headers={**headers, "Accept-Encoding": "identity"}, timeout=httpx2.Timeout(30, read=300),
                                event_hooks={"response": [bounded]})
    return streamable_http_client(url, http_client=client, max_sse_event_size=size)


class _BoundedBody(httpx2.AsyncByteStream):
    """A response's body that ends with httpx's StreamError past ``size`` bytes, which the SDK
    answers, for a JSON body, as its call's failure with the message. An event stream is not one:
    the SDK bounds each of its events, and it may last for hours."""

    def __init__(self, body: httpx2.AsyncByteStream, server: str, size: int) -> None:
        self._body, self._server, self._size = body, server, size

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        read = 0
        async for chunk in self._body:
            read += len(chunk)
            if read > self._size:
                raise httpx2.StreamError(str(MessageTooLarge(self._server, self._size)))
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()
