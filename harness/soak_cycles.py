"""The soak's cycles and what they measure, shared by tests/test_soak.py (counts a CI run can
afford, with assertions) and bench/soak.py (the full counts, printed as a table).

The app runs in this process, wired exactly as ``python app.py`` wires it (server.web_app: the
page at / and the API at /v1 over one LoadedModels), served by uvicorn on a thread. So a cycle can
look into the engine (vLLM's unfinished requests), and the app's memory and threads are this
process's, plus vLLM's engine processes, without the browser that drives the page.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import psutil

from engines import LoadedModels
from engines.backends.vllm_engine_core import engine_cores_under
from harness.browser import bot_messages, free_port, open_tab, replies, send, set_number
from harness.running_server import running_server
from harness.vllm_settings import VLLM
from webui.settings_tab import BACKEND_OPTION_ROWS

HF = {"infer_backend": "huggingface"}
BACKENDS = {"huggingface": HF, "vllm": VLLM}
# A reply of thousands of tokens: every cycle cuts it in the middle.
COUNTING = "Write the numbers from 1 to 1000, separated by commas."
SHORT = [{"role": "user", "content": "What is the capital of France?"}]
# The page's backend options, all left to the backend (None, as an empty field sends).
# The Settings tab's backend options that /load takes empty (enforce_eager has a named choice).
BACKEND_OPTIONS = tuple(name for row in BACKEND_OPTION_ROWS for name in row if name != "enforce_eager")
# The Settings tab's fields (webui/layout.py) for the settings above.
OPTION_FIELDS = {"max_concurrent": "max-concurrent", "max_model_len": "max-model-len", "kv_cache_space_gb": "kv-cache-gb"}
ENGINE_STOPPED = re.compile(r"vLLM's engine process stopped.*Settings", re.S)


# ---- what is measured


def app_processes() -> list[psutil.Process]:
    """This process and what it started for the model (vLLM's engine and worker, multiprocessing's
    resource tracker), but not Playwright's driver and the Chromium it runs."""
    me = psutil.Process()
    members = [me]
    for child in me.children():
        try:
            if "playwright" in " ".join(child.cmdline()):
                continue
            members += [child, *child.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return members


def engine_core() -> psutil.Process:
    """vLLM's engine core process, among this process's descendants."""
    cores = engine_cores_under(os.getpid())
    assert len(cores) == 1, f"expected one vLLM engine core among this process's children, found {len(cores)}"
    return psutil.Process(cores[0])


@dataclass(frozen=True)
class Usage:
    rss: int  # bytes, the whole app tree
    threads: int  # the whole app tree

    @classmethod
    def now(cls) -> Usage:
        rss = threads = 0
        for process in app_processes():
            try:
                rss += process.memory_info().rss
                threads += process.num_threads()
            except psutil.NoSuchProcess:
                pass
        return cls(rss, threads)


@dataclass
class Trace:
    """Usage before a run of cycles and after each cycle."""

    before: Usage = field(default_factory=Usage.now)
    after_each: list[Usage] = field(default_factory=list)

    def sample(self) -> None:
        self.after_each.append(Usage.now())

    @property
    def after(self) -> Usage:
        return self.after_each[-1]

    @property
    def peak(self) -> Usage:
        return Usage(max(u.rss for u in self.after_each), max(u.threads for u in self.after_each))

    def thread_growth(self) -> int:
        """Threads at the end over the median of the first quarter of cycles: a leak of one
        thread per cycle shows as the cycle count, while pools that start a worker on first use
        (asyncio's, httpx's, Gradio's) have settled by then."""
        head = self.after_each[: max(1, len(self.after_each) // 4)]
        return self.after.threads - int(statistics.median(u.threads for u in head))


# ---- the app


@contextmanager
def served_app(loaded_models: LoadedModels) -> Iterator[str]:
    """The page and the API over ``loaded_models``, as ``python app.py`` serves them; yields the page's URL."""
    from app import parse_args
    from server import web_app

    with running_server(web_app(loaded_models, parse_args(["--port", str(free_port())]))) as url:
        yield url + "/"


def model_id(url: str) -> str:
    [model] = httpx.get(f"{url}v1/models", timeout=60).json()["data"]
    return model["id"]


def timed_request(url: str) -> float:
    """Seconds for a short greedy API request, start to finished reply."""
    started = time.perf_counter()
    answer = httpx.post(f"{url}v1/chat/completions", timeout=300,
                        json={"model": model_id(url), "messages": SHORT, "temperature": 0, "max_tokens": 8})
    answer.raise_for_status()
    return time.perf_counter() - started


def wait_until_idle(loaded_models: LoadedModels, timeout: float = 30) -> float:
    """Seconds until no request runs or waits for the model, and vLLM holds none; raises if that
    takes longer than ``timeout``."""
    started = time.monotonic()
    while busy(loaded_models):
        if time.monotonic() - started > timeout:
            raise AssertionError(f"still busy {timeout} s after the last cycle: {busy(loaded_models)}")
        time.sleep(0.05)
    return time.monotonic() - started


def busy(loaded_models: LoadedModels) -> dict[str, int]:
    """What still runs in the model: requests in its waiting line, and vLLM's own count."""
    model = loaded_models.model
    counts = {"running": model.line.running, "waiting": model.line.waiting}
    if model.backend == "vllm":
        counts["vllm unfinished"] = model.engine.unfinished_requests()
    return {name: count for name, count in counts.items() if count}


# ---- cancellation


def api_disconnects(url: str, cycles: int, trace: Trace | None = None, chunks: int = 3) -> None:
    """``cycles`` streamed requests for a long reply, each closed by the client after ``chunks``
    chunks, as a client that goes away does."""
    body = {"model": model_id(url), "messages": [{"role": "user", "content": COUNTING}], "max_tokens": 2000, "stream": True}
    for _ in range(cycles):
        # A client of its own each time: closing it drops the connection, which the server sees.
        with httpx.Client(timeout=300) as client, client.stream("POST", f"{url}v1/chat/completions", json=body) as response:
            response.raise_for_status()
            seen = 0
            for line in response.iter_lines():
                seen += line.startswith("data: ")
                if seen >= chunks:
                    break
            assert seen >= chunks, "the stream ended before the client left"
        if trace is not None:
            trace.sample()


def page_stop_regenerate(page, cycles: int, trace: Trace | None = None) -> None:
    """``cycles`` times, in the page: Regenerate, wait for the reply to be written, Stop. The
    conversation must hold a message asking for a long reply (``start_long_reply``)."""
    from playwright.sync_api import expect

    stats = page.locator("#chatbot .reply-stats")
    for _ in range(cycles):
        before = replies(page)
        page.locator("#regenerate-btn").click()
        page.wait_for_function(f"window.replies > {before}", timeout=60_000)
        # The old reply and its stats line go as the new reply starts; the stats line comes back when it ends.
        expect(stats).to_have_count(0)
        expect(bot_messages(page).last).to_contain_text(re.compile(r"\d"))
        click_stop(page)
        expect(stats.last).to_contain_text("stopped after")
        if trace is not None:
            trace.sample()


def start_long_reply(page) -> None:
    """Ask for the long reply in the page, and stop it once it is written. Greedy: sampled, the
    model often answers the request in a dozen tokens instead, over before Stop can be clicked."""
    from playwright.sync_api import expect

    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", 4000)  # the whole count; the context cuts it first
    open_tab(page, "Chat")
    before = send(page, COUNTING)
    page.wait_for_function(f"window.replies > {before}", timeout=60_000)
    expect(bot_messages(page).last).to_contain_text(re.compile(r"\d"))
    click_stop(page)


def click_stop(page) -> None:
    """Press Stop and wait until the reply has stopped. The click is dispatched to the button:
    while a fast reply streams, Gradio re-renders the button row with every update, and
    Playwright's click, waiting for the button to hold still, can wait until the reply is over."""
    from playwright.sync_api import expect

    page.locator("#stop-btn").dispatch_event("click")
    expect(page.locator("#stop-btn")).to_be_hidden()


# ---- model lifetime


def load_request(settings: dict) -> dict:
    """The page's /load call for LoadedModels ``settings``: every control by name, those not given
    left empty as in the page."""
    options = {k: v for k, v in settings.items() if k != "infer_backend"}
    return {"infer_backend": settings["infer_backend"], "model_name_or_path": "", "infer_dtype": "auto", "enforce_eager": "auto",
            "lora_adapters": "", "engine_args": ""} | dict.fromkeys(BACKEND_OPTIONS) | options


def load_in_page(page, settings: dict) -> None:
    """Choose ``settings`` (a backend and its numeric options) in the Settings tab and press Load."""
    open_tab(page, "Settings")
    page.locator("#backend input[role=combobox]").click()
    page.get_by_role("option", name=settings["infer_backend"], exact=True).click()
    page.locator("#backend-options").get_by_text("Backend options").click()
    for name, value in settings.items():
        if name != "infer_backend":
            set_number(page, OPTION_FIELDS[name], value)
    page.locator("#load-btn").click()


def page_load(client, settings: dict) -> str:
    """Load through the page's /load endpoint (gradio_client); returns the status line."""
    return client.predict(**load_request(settings), api_name="/load")[0]


def page_unload(client) -> str:
    return client.predict(api_name="/unload")[0]


def page_reply(client, text: str = "Hi") -> str:
    """A short greedy reply through the page's /chat endpoint, in a conversation of its own: its
    text. Fails unless the page shows under the message a written reply and the stats line that
    ends it, and no note (such as the one saying that the model could not answer)."""
    client.reset_session()
    chatbot = client.predict({"text": text, "files": []}, system="", tools="", temperature=0, max_new_tokens=4, seed=None, api_name="/chat")[0]
    asked = max(index for index, message in enumerate(chatbot) if message["role"] == "user")
    shown = chatbot[asked + 1:]
    notes = [message["metadata"]["title"] for message in shown if (message.get("metadata") or {}).get("title")]
    texts = ["".join(part.get("text", "") for part in message["content"]) for message in shown]
    answered = not notes and len(texts) == 2 and texts[0].strip() and 'class="reply-stats"' in texts[1]
    assert answered, f"the page shows no reply to {text!r}, but: {json.dumps(shown, ensure_ascii=False)}"
    return texts[0]


@dataclass
class LifetimeCycle:
    load_seconds: float
    after_unload: Usage


def load_unload_cycles(client, settings: dict, cycles: int, on_cycle: Callable[[LifetimeCycle], None] | None = None) -> list[LifetimeCycle]:
    """Load ``settings`` through the page, answer one message, unload; the app's usage after each unload."""
    done = []
    for _ in range(cycles):
        started = time.perf_counter()
        status = page_load(client, settings)
        assert status.startswith("✓ Loaded"), status
        seconds = time.perf_counter() - started
        page_reply(client)
        page_unload(client)
        done.append(LifetimeCycle(seconds, Usage.now()))
        if on_cycle is not None:
            on_cycle(done[-1])
    return done
