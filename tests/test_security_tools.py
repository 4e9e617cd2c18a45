"""Tools that would freeze every user (issue 60, items 1, 5 and 6): a calculation and an MCP server's
argument schema that hold the event loop, which serves every page event and every ``/v1``
request, and an MCP server that sends without bounds (harness/mcp_hostile_server.py): a result
of 40 MB, a tool list that never ends, 20,000 tools, schemas of megabytes, a listing never answered.

A reply's tool calls run on that loop (webui's reply handler awaits agent_loop.reply_with_tools,
which awaits toolbox.run_call); the model only chooses the arguments. So each attack is the call
itself, awaited by a request handler on a server's one loop, as uvicorn serves the app, while
another user asks that server for ``/v1/models``; the server's memory is sampled meanwhile. The
server is a process of its own: a client in its process would wait for the GIL that a calculation
holds before it even starts its clock, and measure nothing. Before the fix, ``round(1, -10**7)``
held the other user 12.2 s, two 300 MB string formats grew the server from 367 to 1,509 MiB, and
``^(a|a)*$`` on 26 characters held others 4.2 s, twice as long for each character more. One 40 MB
MCP result cost 73 s of CPU and +150 MiB kept; a tool list that never ends grew the app by 23 MB/s.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi import FastAPI, Request

from engines.prompt.reply_parser import ToolCall
from harness.browser import free_port
from harness.mcp_config import HOSTILE_SERVER, demo_entry, hostile_entry
from tools import BUILTIN_TOOLS, McpServers, Tool, run_call
from tools.bounded_work import WORK_SECONDS, WorkLimits, WorkRefused, run_bounded
from tools.mcp_servers import ServerConfig
from tools.tool_limits import ToolLimits

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements.txt)")
# A server process of its own (a stand-in for the app's loop), so out of scripts/test.sh --quick.
pytestmark = pytest.mark.server

# Another user's request is answered within this while a tool's work runs (on 2 busy cores).
ANSWERED_WITHIN = 3
MEMORY_SHARE = 0.10
# Before the fix, 26 a's held the loop 4.2 s; 30 a's and a b take minutes of backtracking.
BACKTRACKING_WORD = "a" * 30 + "b"
# What the server says as a call reaches it: the other user asks only once the attack runs.
CALL_ARRIVED = "call arrived"
# How long a listing may take in these tests (ToolLimits.mcp_list_seconds), for the server that never
# answers one. The crowd's 20,000 tools take 1.2 s to list alone and passed 2 s beside the suite's
# other worker: the limit must sit well above every listing that does answer.
STALLED_LIST_SECONDS = 6


def serve_tools(port: int, entries: dict | None = None, limits: dict | None = None) -> None:
    """The server of these tests: one loop that answers ``/v1/models`` and runs a tool call (the
    built-in ones and those of the MCP servers ``entries``, the demo server's by default, within
    ``limits``), as the app's does, and says the servers' statuses."""
    import uvicorn

    entries = entries or {"demo": demo_entry()}
    servers = McpServers({name: ServerConfig.model_validate(entry) for name, entry in entries.items()}, ToolLimits(**(limits or {})))
    servers.start()
    servers.wait_started(timeout=60)
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "model", "object": "model"}]}

    @app.post("/call/{name}")
    async def call(name: str, request: Request) -> dict:
        arguments = (await request.body()).decode()
        print(CALL_ARRIVED, flush=True)
        result = await run_call({**BUILTIN_TOOLS, **servers.tools()}[name], ToolCall(id="call-1", name=name, arguments=arguments))
        return {"content": result.content, "error": result.error}

    @app.get("/status/{name}")
    async def status(name: str) -> dict:
        [status] = [status for status in servers.statuses() if status.name == name]
        return {"state": status.state, "detail": status.detail, "tools": len(status.tools)}

    try:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    finally:
        servers.close()


@dataclass
class ToolServer:
    url: str
    process: subprocess.Popen


@pytest.fixture(scope="module")
def tool_server():
    yield from served_tools()


@pytest.fixture(scope="module")
def hostile_servers():
    """The hostile MCP server twice over stdio (one to end with its result) and once over HTTP."""
    port = free_port()
    over_http = subprocess.Popen([sys.executable, str(HOSTILE_SERVER), "--http", str(port)])
    try:
        yield from served_tools({"dumper": hostile_entry(), "lister": hostile_entry(), "web": {"url": f"http://127.0.0.1:{port}/mcp"}},
                                {"mcp_list_seconds": STALLED_LIST_SECONDS})
    finally:
        over_http.kill()
        over_http.wait()


def served_tools(entries: dict | None = None, limits: dict | None = None):
    """serve_tools in a process of its own, until the module's tests are done."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", f"from tests.test_security_tools import serve_tools; serve_tools({port}, {entries!r}, {limits!r})"],
                               cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, bufsize=0)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the tools' server did not start"
            try:
                httpx.get(f"{url}/v1/models", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        yield ToolServer(url, process)
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def demo_server():
    servers = McpServers({"demo": ServerConfig.model_validate(demo_entry())})
    servers.start()
    servers.wait_started(timeout=60)
    yield servers
    servers.close()


@dataclass
class Attack:
    result: dict
    seconds: float
    other_user_seconds: float
    rss_before: int
    rss_peak: int
    rss_after: int


def attack_while_another_asks(server: ToolServer, tool: str, arguments: dict) -> Attack:
    """The call of ``tool`` with ``arguments``, and a fifth of a second into it another user's ``/v1/models``."""
    said = server.process.stdout.fileno()
    while select.select([said], [], [], 0)[0]:  # what the server said of earlier calls
        os.read(said, 4096)
    process = psutil.Process(server.process.pid)
    rss_before = process.memory_info().rss
    samples = [rss_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            samples.append(process.memory_info().rss)

    attack: dict = {}

    def attacker() -> None:
        started = time.monotonic()
        attack["result"] = httpx.post(f"{server.url}/call/{tool}", content=json.dumps(arguments), timeout=600).json()
        attack["seconds"] = time.monotonic() - started

    threading.Thread(target=sample, daemon=True).start()
    thread = threading.Thread(target=attacker)
    thread.start()
    try:
        assert select.select([said], [], [], 60)[0] and os.read(said, 4096).strip() == CALL_ARRIVED.encode(), "the call did not reach the server"
        time.sleep(0.2)
        started = time.monotonic()
        assert httpx.get(f"{server.url}/v1/models", timeout=600).status_code == 200
        other_user_seconds = time.monotonic() - started
    finally:
        thread.join(600)
        done.set()
    return Attack(attack["result"], attack["seconds"], other_user_seconds, rss_before, max(samples), process.memory_info().rss)


def assert_nobody_else_held(attack: Attack, peak_bounded: bool = True) -> None:
    assert attack.other_user_seconds < ANSWERED_WITHIN, f"another user waited {attack.other_user_seconds:.1f} s"
    for rss in (attack.rss_peak, attack.rss_after) if peak_bounded else (attack.rss_after,):
        assert rss < attack.rss_before * (1 + MEMORY_SHARE), f"the server grew from {attack.rss_before / 2**20:.0f} to {rss / 2**20:.0f} MiB"


@pytest.mark.parametrize("expression, why", [
    ("round(1, -10**7)", "round takes a whole number of digits from -4000 to 4000, not -10000000"),
    ("('%0300000000d' % 1) + ('%0300000000d' % 1)", "'%0300000000d' is not a real number: this calculator takes real numbers only"),
    ("f'{1:0300000000d}'", "JoinedStr is not available"),
])
def test_a_calculation_that_would_hold_the_server_is_refused_at_its_cause_while_others_are_answered(tool_server, expression, why):
    attack = attack_while_another_asks(tool_server, "calculator", {"expression": expression})
    assert_nobody_else_held(attack)
    assert attack.result["error"] and why in attack.result["error"] and attack.result["content"] == f"Error: {attack.result['error']}"
    assert attack.seconds < ANSWERED_WITHIN


def test_an_mcp_schema_pattern_that_backtracks_is_stopped_at_its_time_limit_while_others_are_answered(tool_server):
    attack = attack_while_another_asks(tool_server, "demo__spell_a", {"word": BACKTRACKING_WORD})
    assert_nobody_else_held(attack)
    assert attack.result["error"] == (
        f"checking the arguments against the patterns and rules of demo__spell_a's parameters took more than this server gives a "
        f"tool's work ({WORK_SECONDS} s of CPU time, 256 MB of memory), so it was stopped")
    fitting = httpx.post(f"{tool_server.url}/call/demo__spell_a", content='{"word": "aaaa"}', timeout=60).json()
    assert fitting == {"content": "aaaa", "error": None}


async def test_work_past_its_cpu_time_or_memory_is_stopped_and_said():
    def spin() -> str:
        while True:
            pass

    def hoard() -> str:
        return str(len(bytearray(2**30)))

    for job in (spin, hoard):
        with pytest.raises(WorkRefused, match=r"^the test's work took more than this server gives a tool's work \(1 s of CPU time, 64 MB"):
            await run_bounded(job, what="the test's work", limits=WorkLimits(seconds=1, memory=64 * 2**20))


async def test_stop_ends_a_call_and_its_work_at_once(demo_server):
    """Stop cancels the reply, and with it the call: the child checking its arguments is killed."""
    tool: Tool = demo_server.tools()["demo__spell_a"]
    before = {child.pid for child in psutil.Process().children()}
    call = asyncio.create_task(run_call(tool, ToolCall(id="call-1", name=tool.name, arguments=json.dumps({"word": BACKTRACKING_WORD}))))
    deadline = time.monotonic() + 10
    while not (working := {child.pid for child in psutil.Process().children()} - before):
        assert time.monotonic() < deadline, "the arguments' check did not start"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    stopped = time.monotonic()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert time.monotonic() - stopped < 1
    killed = time.monotonic() + 1  # SIGKILL is sent as the call ends (its CPU limit alone would take 2 s), freed soon after
    while any(_running(pid) for pid in working):
        assert time.monotonic() < killed, "the child checking the arguments still runs"
        await asyncio.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("server", ["dumper", "web"])
def test_an_mcp_result_past_the_message_size_is_refused_as_it_is_read_while_others_are_answered(hostile_servers, server):
    """40 MB in one message, over stdio (one line: the session ends, the server with it) and over HTTP (one JSON body)."""
    attack = attack_while_another_asks(hostile_servers, f"{server}__dump", {"characters": 40 * 2**20})
    print(f"\n{server}: {attack}")
    assert_nobody_else_held(attack)
    assert f"the MCP server {server} sent a message of more than 4 MB, this app's limit for one message from an MCP server" in attack.result["error"]
    assert attack.seconds < ANSWERED_WITHIN
    if server == "dumper":  # its session ended as its process does, within seconds
        deadline = time.monotonic() + 10
        while (status := httpx.get(f"{hostile_servers.url}/status/dumper", timeout=10).json())["state"] != "failed":
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert "more than 4 MB" in status["detail"]


@pytest.mark.parametrize("mode, said, offered", [
    ("endless", "its tool list goes on past 20 pages, this app's limit (ToolLimits.mcp_list_pages): only the first 22 are offered", 22),
    ("crowd", "it lists more than 256 tools, this app's limit (ToolLimits.mcp_tools_per_server): only the first 256 are offered", 256),
    ("bulky", "its tools' descriptions and schemas pass 1 MB together, this app's limit (ToolLimits.mcp_schemas_size): only the first", None),
    ("stall", f"listing its tools again took more than {STALLED_LIST_SECONDS} s, this app's limit (ToolLimits.mcp_list_seconds): "
              "the tools listed before are offered", 2),
])
def test_an_mcp_tool_list_past_its_limits_is_cut_and_said_while_others_are_answered(hostile_servers, mode, said, offered):
    """The server says its tools changed, then lists them as ``mode`` says; the app lists them
    again in the background, which another user must not feel."""
    url = hostile_servers.url
    assert httpx.post(f"{url}/call/lister__turn", content='{"mode": "plain"}', timeout=60).json()["error"] is None
    while httpx.get(f"{url}/status/lister", timeout=10).json() != {"state": "ready", "detail": "", "tools": 2}:
        time.sleep(0.1)
    process = psutil.Process(hostile_servers.process.pid)
    rss_before, other_user_seconds = process.memory_info().rss, []
    samples = [rss_before]
    assert httpx.post(f"{url}/call/lister__turn", content=json.dumps({"mode": mode}), timeout=60).json()["error"] is None
    deadline = time.monotonic() + 30
    while said not in (status := httpx.get(f"{url}/status/lister", timeout=10).json())["detail"]:
        assert time.monotonic() < deadline, f"the listing was not cut: {status}"
        asked = time.monotonic()
        assert httpx.get(f"{url}/v1/models", timeout=60).status_code == 200
        other_user_seconds.append(time.monotonic() - asked)
        samples.append(process.memory_info().rss)
    time.sleep(0.5)  # the listing's freed memory handed back just after it is said
    attack = Attack(status, 0, max(other_user_seconds, default=0), rss_before, max(samples), process.memory_info().rss)
    print(f"\n{mode}: {attack}")
    # A page is parsed whole (within the message size): 20,000 tools in 1.6 MB peak at +45 MiB
    # while they are read, and only what is offered is kept.
    assert_nobody_else_held(attack, peak_bounded=False)
    assert status["state"] == "ready" and status["tools"] == (offered or status["tools"])
    assert httpx.post(f"{url}/call/lister__dump", content='{"characters": 3}', timeout=60).json() == {"content": "xxx", "error": None}


def test_a_change_said_while_the_tools_are_listed_is_listed_after_it(hostile_servers):
    """The listing under way may have read the list from before the change: the change is listed
    once more after it, not lost (the server would be offered its old tools until it changed again)."""
    url = hostile_servers.url
    crowd = "it lists more than 256 tools, this app's limit (ToolLimits.mcp_tools_per_server)"
    assert httpx.post(f"{url}/call/lister__turn", content='{"mode": "stall"}', timeout=60).json()["error"] is None
    assert httpx.post(f"{url}/call/lister__turn", content='{"mode": "crowd"}', timeout=60).json()["error"] is None
    deadline = time.monotonic() + STALLED_LIST_SECONDS + 30
    while crowd not in (status := httpx.get(f"{url}/status/lister", timeout=10).json())["detail"]:
        assert time.monotonic() < deadline, f"the second change was lost: {status}"
        time.sleep(0.2)
    assert status["state"] == "ready" and status["tools"] == 256
