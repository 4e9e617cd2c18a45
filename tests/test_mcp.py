"""MCP servers' tools (tools/mcp_servers.py) against a real MCP server (the SDK's own,
harness/mcp_demo_server.py) over stdio and over Streamable HTTP, beside servers that fail in each
way a server can: a command not found, one that never answers, one that writes what is not
MCP, one that exits at once, one that dies mid-call; an answer of 2,000 calls of its tools, and a
long result for a model whose context is unknown. The model's loop over these tools is
tests/test_tools.py's and the engine contract's; the page's is in tests/test_browser.py; what a
hostile server sends, in tests/test_security_tools.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from engines import ChatRequest, Response
from engines.errors import ConfigError
from engines.generation_args import GenerationArgs
from engines.prompt.reply_parser import ReplyParts, ToolCall
from harness.browser import free_port
from harness.mcp_config import DEMO_SERVER, demo_entry, hostile_entry, write_config
from tools import McpServers, ToolResult, ToolSettings, reply_with_tools, run_call
from tools.mcp_servers import ServerConfig, read_config
from tools.tool_limits import TOOL_LIMITS

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements.txt)")

NEVER_ANSWERS = {"command": sys.executable, "args": ["-c", "import time; time.sleep(600)"], "startupTimeout": 2}
NOT_MCP = {"command": sys.executable, "args": ["-c", "print('hello, not JSON-RPC', flush=True); import time; time.sleep(600)"],
           "startupTimeout": 2}


def configs(**servers: dict) -> dict[str, ServerConfig]:
    return {name: ServerConfig.model_validate(entry) for name, entry in servers.items()}


def started(servers: McpServers) -> McpServers:
    servers.start()
    servers.wait_started(timeout=60)
    return servers


def call(servers: McpServers, name: str, arguments: str = "{}"):
    return asyncio.run(run_call(servers.tools()[name], ToolCall(id="call-1", name=name, arguments=arguments)))


def own_processes() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def servers():
    """The demo server twice (one to be crashed), beside four that fail to start."""
    servers = started(McpServers(configs(demo=demo_entry(), doomed=demo_entry(), missing={"command": "no-such-command-here"},
                                         silent=NEVER_ANSWERS, babbling=NOT_MCP,
                                         quitter={"command": sys.executable, "args": ["-c", "raise SystemExit(2)"]})))
    yield servers
    servers.close()


def test_each_server_is_ready_or_failed_with_why(servers):
    statuses = {status.name: status for status in servers.statuses()}
    assert statuses["demo"].state == "ready"
    assert statuses["demo"].tools == ("demo__add", "demo__write_note", "demo__wait", "demo__crash", "demo__header", "demo__spell_a", "demo__grow")
    assert statuses["missing"].summary() == "failed (its command was not found: no-such-command-here)"
    assert statuses["silent"].summary() == "failed (it did not answer within 2 s of starting)"
    assert statuses["babbling"].summary() == "failed (it did not answer within 2 s of starting)"
    assert statuses["quitter"].state == "failed" and "closed" in statuses["quitter"].detail


def test_a_tool_runs_with_the_arguments_its_schema_takes(servers):
    result = call(servers, "demo__add", '{"a": 2, "b": 40}')
    assert (result.content, result.error) == ("42", None)
    wrong = call(servers, "demo__add", '{"a": "two", "b": 40}')
    assert wrong.error and "demo__add's parameters: a: 'two' is not of type 'integer'" in wrong.error, "checked before it reaches the server"


def test_the_servers_hints_say_which_tools_only_read_and_the_operator_may_say_otherwise():
    servers = started(McpServers(configs(demo=demo_entry(readOnly=["wait"], askFirst=["header"]))))
    try:
        read_only = {name: tool.read_only for name, tool in servers.tools().items()}
    finally:
        servers.close()
    assert read_only == {"demo__add": True, "demo__write_note": False, "demo__wait": True, "demo__crash": False, "demo__header": False,
                         "demo__spell_a": True, "demo__grow": False}


def test_the_tools_a_server_adds_are_offered_once_it_says_so(servers):
    assert "demo__hello" not in servers.tools()
    assert call(servers, "demo__grow").content == "grown"
    deadline = time.monotonic() + 10
    while "demo__hello" not in servers.tools() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert call(servers, "demo__hello").content == "hello there"


def test_a_call_cancelled_ends_at_once(servers):
    async def cancelled_after_a_moment() -> float:
        waiting = asyncio.create_task(run_call(servers.tools()["demo__wait"], ToolCall(id="w", name="demo__wait", arguments='{"seconds": 60}')))
        await asyncio.sleep(0.5)
        cancelled = time.perf_counter()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return time.perf_counter() - cancelled

    assert asyncio.run(cancelled_after_a_moment()) < 1
    assert call(servers, "demo__add", '{"a": 1, "b": 1}').content == "2", "the server still answers after a cancelled call"


def test_a_call_over_its_time_is_an_error_result():
    quick = started(McpServers(configs(demo=demo_entry(timeout=0.5))))
    try:
        result = call(quick, "demo__wait", '{"seconds": 30}')
        assert result.error == "the MCP server demo did not answer within 0.5 s"
    finally:
        quick.close()


def test_a_server_that_dies_mid_call_is_an_error_result_and_the_others_go_on(servers):
    result = call(servers, "doomed__crash")
    assert result.error and result.content.startswith("Error: ")
    deadline = time.monotonic() + 10
    while servers.statuses()[1].state != "failed" and time.monotonic() < deadline:
        time.sleep(0.05)
    doomed = servers.statuses()[1]
    assert doomed.name == "doomed" and doomed.summary().startswith("failed (the connection to it closed")
    assert not any(name.startswith("doomed__") for name in servers.tools())
    assert call(servers, "demo__add", '{"a": 3, "b": 4}').content == "7"


def test_closing_ends_every_server_process_it_started():
    before = own_processes()
    servers = started(McpServers(configs(one=demo_entry(), two=demo_entry(), silent=NEVER_ANSWERS)))
    assert len(own_processes() - before) >= 2
    servers.close()
    deadline = time.monotonic() + 10
    while own_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert own_processes() - before == set(), [psutil.Process(pid).cmdline() for pid in own_processes() - before]


def test_closing_while_a_server_connects_cuts_it_off():
    before = own_processes()
    servers = McpServers(configs(slow={**NEVER_ANSWERS, "startupTimeout": 120}))
    servers.start()
    deadline = time.monotonic() + 30
    while not own_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    closing = time.monotonic()
    servers.close()
    assert time.monotonic() - closing < 10
    assert servers.statuses()[0].state == "closed"
    deadline = time.monotonic() + 10
    while own_processes() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert own_processes() - before == set()


def test_a_streamable_http_server_is_reached_at_its_url_with_its_headers():
    port = free_port()
    server = subprocess.Popen([sys.executable, str(DEMO_SERVER), "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        remote = started(McpServers(configs(remote={"url": url, "headers": {"X-Test": "yes"}})))
        try:
            assert remote.statuses()[0].state == "ready", remote.statuses()
            assert call(remote, "remote__add", '{"a": 20, "b": 22}').content == "42"
            assert call(remote, "remote__header", '{"name": "X-Test"}').content == "yes"
        finally:
            remote.close()
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize(("text", "said"), [
    ("{", "is not a JSON object"),
    ('{"servers": {}}', 'has no "mcpServers" object'),
    ('{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}', "give either a command"),
    ('{"mcpServers": {"a": {}}}', "give either a command"),
    ('{"mcpServers": {"a.b": {"command": "x"}}}', "use letters, digits"),
    ('{"mcpServers": {"a__b": {"command": "x"}}}', "use letters, digits"),
    ('{"mcpServers": {"a": {"command": "x", "args": "not a list"}}}', "'a' in"),
])
def test_a_config_that_is_not_one_says_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "mcp.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=said):
        read_config(path)


def test_a_config_of_other_clients_reads_and_its_disabled_servers_are_left_out(tmp_path):
    path = write_config(tmp_path / "mcp.json", {"a": {"command": "x", "autoApprove": [], "type": "stdio"}, "b": {"url": "http://h/mcp", "disabled": True}})
    assert list(read_config(path)) == ["a"]


def test_a_chat_names_the_servers_tools_and_a_tool_gone_says_why(tool_catalog):
    servers = started(McpServers(configs(demo=demo_entry(), missing={"command": "no-such-command-here"})))
    tool_catalog.connect(servers)
    try:
        assert list(ToolSettings.build_for(tool_catalog, run_tools=["calculator", "demo__add"]).tools(tool_catalog)) == ["calculator", "demo__add"]
        with pytest.raises(ConfigError, match=r"names no tool here: missing__x \(its MCP server missing is failed \(its command was not found"):
            ToolSettings.build_for(tool_catalog, run_tools=["missing__x"])
    finally:
        tool_catalog.close()
    assert list(tool_catalog.tools()) == ["calculator", "current_time", "python"]


class CallingModel:
    """A model whose first answer is ``calls`` and whose second says it is done; its context
    length unknown, as a remote server's that does not say it."""

    context_length = None
    generation_defaults = GenerationArgs()

    def __init__(self, calls: list[ToolCall]) -> None:
        self.answers = [ReplyParts(tool_calls=tuple(calls)), ReplyParts(content="done")]

    async def astream_reply(self, request: ChatRequest, progress: bool = False):
        yield Response("", 0, 0, "stop", self.answers.pop(0))

    def held(self):
        return contextlib.nullcontext()


def run_queue_seconds() -> float:
    """How long this thread has waited for a core so far (Linux's schedstat; 0 where it has none).
    A busy machine keeps the event loop's thread waiting for a core, which is not the loop held by
    the reply: a CI run beside other tests once measured 1.04 s of that."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def replied(model: CallingModel, tools: dict) -> tuple[list, float, int]:
    """The reply's items, the longest the event loop was held meanwhile (another request's wait,
    less the time the machine kept the loop's thread waiting for a core), and this process's
    growth in memory after it."""
    rss_before = psutil.Process().memory_info().rss
    longest, running = 0.0, True

    async def another_request() -> None:
        nonlocal longest
        while running:
            asked, queued = time.monotonic(), run_queue_seconds()
            await asyncio.sleep(0.01)
            longest = max(longest, time.monotonic() - asked - (run_queue_seconds() - queued))

    waiting = asyncio.create_task(another_request())
    items = [item async for item in reply_with_tools(model, ChatRequest(messages=[{"role": "user", "content": "go"}]), tools)]
    running = False
    await waiting
    return items, longest, psutil.Process().memory_info().rss - rss_before


async def test_an_answer_of_2000_calls_runs_only_the_first_ones_and_tells_the_model_of_the_rest():
    servers = started(McpServers(configs(demo=demo_entry())))
    try:
        tools = servers.tools()
        calls = [ToolCall("demo__write_note", json.dumps({"text": f"note {n}"})) for n in range(2000)]
        items, longest, grown = await replied(CallingModel(calls), tools)
        results = [item for item in items if isinstance(item, ToolResult)]
        after = await run_call(tools["demo__write_note"], ToolCall("demo__write_note", '{"text": "one more"}'))
    finally:
        servers.close()
    limit = TOOL_LIMITS.calls_per_answer
    assert len(results) == 2000 and sorted(result.content for result in results[:limit]) == sorted(f"noted ({n} notes)" for n in range(1, limit + 1))
    assert {result.error for result in results[limit:]} == {
        f"not run: an answer may call at most {limit} tools, this server's limit (ToolLimits.calls_per_answer); call the rest in your next answer"}
    assert after.content == f"noted ({limit + 1} notes)", "none of the others ran"
    assert longest < 1 and grown < 0.1 * psutil.Process().memory_info().rss


async def test_a_result_is_cut_at_a_fixed_length_where_the_models_context_is_unknown():
    servers = started(McpServers(configs(hostile=hostile_entry())))
    try:
        items, longest, grown = await replied(CallingModel([ToolCall("hostile__dump", '{"characters": 1000000}')]), servers.tools())
    finally:
        servers.close()
    [result] = [item for item in items if isinstance(item, ToolResult)]
    kept = TOOL_LIMITS.result_characters_without_context
    assert result.content == "x" * kept + (
        f"\n[… cut here: {1_000_000 - kept:,} of the result's 1,000,000 characters were left out, as the model's context length is unknown "
        f"and a result is kept to its first {kept:,} characters then (ToolLimits.result_characters_without_context)]")
    assert longest < 1 and grown < 0.1 * psutil.Process().memory_info().rss
