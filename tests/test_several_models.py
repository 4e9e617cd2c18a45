"""Several models loaded at once (engines/loaded_models.py), on llama.cpp and the embedded GGUF under
other names: kept within a memory budget, the least recently used idle one unloaded first and its
memory given back, a busy one never (nor one whose reply waits on a tool or the user's say); an
idle model unloaded after its time; the API serving each loaded model by its name, and loading a
model the server lists where the operator lets requests: never as the default, never past the
budget, and only so many loads a minute for each user."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)", exc_type=ImportError)

from engines import ChatRequest, KeepSettings, LoadedModels, Response  # noqa: E402
from engines.model_files.paths import default_gguf  # noqa: E402
from harness.app_in_process import AppInProcess  # noqa: E402
from harness.engine_contract import QUESTION  # noqa: E402
from tests.api_samples import COUNTING  # noqa: E402
from tools import BUILTIN_TOOLS, Tool, ToolResult, reply_with_tools  # noqa: E402

# A small context: the KV cache of each is filled in no time, and four fit easily.
LLAMACPP = {"infer_backend": "llamacpp", "max_model_len": 1024}
# The share of an unloaded model's memory that may stay (as for unload, tests/test_llamacpp_engine.py).
UNLOAD_LEFT_BEHIND = 0.25
DEFAULT_MODEL = "SmolLM2-135M-Instruct"
# Loopback addresses standing for two users of a server without logins (the API counts each address as one).
ATTACKER, OTHER_USER = "127.0.0.2", "127.0.0.3"
# How long another user's ordinary question may take while an attack runs.
ANSWERED_WITHIN = 10.0
# How far the server's memory may be from where it was, after an attack.
MEMORY_BOUND = 0.10


def named(model_id: str) -> dict:
    return {**LLAMACPP, "served_model_name": model_id}


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def loaded_ids(loaded_models: LoadedModels) -> list[str]:
    return [model.model_id for model in loaded_models.models]


class Busy:
    """A long greedy reply of ``model``, streamed on a thread until ``stop``; ``started`` once
    its first words are in."""

    def __init__(self, model) -> None:
        self.started, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(model,))
        self._thread.start()
        assert self.started.wait(120), "the long reply did not start"

    def _run(self, model) -> None:
        for _ in model.stream_reply(COUNTING, temperature=0, max_new_tokens=3000):
            self.started.set()
            if self._stop.is_set():
                break

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def listed(app) -> list[tuple[str, bool, list[str]]]:
    """/v1/models: each model's id, whether it is loaded, and what it reads."""
    return [(card["id"], card["loaded"], card["input_modalities"]) for card in httpx.get(f"{app.url}v1/models", timeout=30).json()["data"]]


def models_folder(tmp_path: Path, *names: str) -> Path:
    """A models folder holding the embedded GGUF under each of ``names``."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in names:
        (folder / f"{name}.gguf").symlink_to(default_gguf())
    return folder


def on_demand_app(tmp_path: Path, *names: str, flags: tuple[str, ...] = ()) -> AppInProcess:
    """The API alone on the embedded model, loading on demand the copies ``names`` its models folder holds."""
    return AppInProcess(tmp_path, ("api", "--backend", "llamacpp", "--models-memory", "64gb", "--load-on-demand",
                                   "--models-dir", str(models_folder(tmp_path, *names)), *flags))


def ask(app, model: str, address: str) -> tuple[httpx.Response, float]:
    """A short greedy question to ``model`` from ``address``: the answer, and how long it took."""
    started = time.monotonic()
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=300) as client:
        answer = client.post(f"{app.url}v1/chat/completions", json={"model": model, "messages": QUESTION, "temperature": 0, "max_tokens": 4})
    return answer, time.monotonic() - started


def while_another_asks(app, attack) -> tuple[httpx.Response, float]:
    """``attack()`` on a thread while another user asks the default model: what the attack got,
    and how long the other user waited for an answer (asserted to be one)."""
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("attack", attack()))
    thread.start()
    try:
        time.sleep(0.3)
        answered, seconds = ask(app, DEFAULT_MODEL, OTHER_USER)
    finally:
        thread.join(300)
    assert answered.status_code == 200, answered.text
    return got["attack"], seconds


class LongStream:
    """A long greedy reply of ``model`` streamed from ``address`` on a thread until ``stop``,
    once its first words are in."""

    def __init__(self, app, model: str, address: str) -> None:
        self._app, self._started, self._stop = app, threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(model, address))
        self.status: int | None = None
        self._thread.start()
        assert self._started.wait(120) and self.status == 200, f"the long reply did not start: {self.status}"

    def _run(self, model: str, address: str) -> None:
        asked = {"model": model, "messages": COUNTING, "temperature": 0, "max_tokens": 3000, "stream": True}
        try:
            with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=300) as client, \
                    client.stream("POST", f"{self._app.url}v1/chat/completions", json=asked) as events:
                self.status = events.status_code
                for line in events.iter_lines():
                    if '"content"' in line:
                        self._started.set()
                    if self._stop.is_set():
                        return
        finally:
            self._started.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


@pytest.mark.slow
def test_a_memory_budget_keeps_models_loaded_and_unloads_the_least_recently_used_idle_one():
    loaded_models = LoadedModels(keep=KeepSettings(models_memory=64 << 30))
    try:
        first = loaded_models.load(named("first"))
        before = rss()
        second = loaded_models.load(named("second"))
        footprint = rss() - before
        assert footprint > 50 * 2**20, f"a second model should take memory of its own: {footprint / 2**20:.0f} MiB"
        assert loaded_ids(loaded_models) == ["second", "first"] and loaded_models.model is second, "the model loaded last is the default"
        assert "Also loaded: first." in loaded_models.describe()
        # Each answers by its id, loaded once: the engines are those loaded.
        assert loaded_models.for_request("first") is first and loaded_models.for_request("nonesuch") is None
        assert first.chat(QUESTION, temperature=0, max_new_tokens=4)[0].response_length == 4
        assert second.chat(QUESTION, temperature=0, max_new_tokens=4)[0].response_length == 4

        # Over the budget, the least recently used idle model is unloaded: "second", as "first" was asked since.
        with_two = rss()
        loaded_models.keep = KeepSettings(models_memory=with_two + footprint // 2)
        third = loaded_models.load(named("third"))
        assert loaded_ids(loaded_models) == ["third", "first"] and second.engine is None
        after = rss()
        print(f"\ntwo models {with_two / 2**20:.0f} MiB, one model's {footprint / 2**20:.0f} MiB; "
              f"a third loaded and the least recently used unloaded: {after / 2**20:.0f} MiB")
        assert after - with_two < UNLOAD_LEFT_BEHIND * footprint, (
            f"unloading the least recently used left {(after - with_two) / 2**20:.0f} MiB of a model's {footprint / 2**20:.0f} MiB behind")

        # A model writing a reply stays, even over the budget; the idle one goes.
        busy = Busy(first)
        try:
            loaded_models.keep = KeepSettings(models_memory=1)
            loaded_models.load(named("fourth"))
            assert loaded_ids(loaded_models) == ["fourth", "first"] and third.engine is None and first.engine is not None
        finally:
            busy.stop()
    finally:
        loaded_models.unload()
    assert loaded_models.empty and first.engine is None


@pytest.mark.slow
def test_an_idle_model_is_unloaded_after_its_time_and_a_busy_one_is_not():
    idle_seconds = 1.0
    loaded_models = LoadedModels(keep=KeepSettings(idle_unload_minutes=idle_seconds / 60))
    try:
        model = loaded_models.load(LLAMACPP)
        busy = Busy(model)
        try:
            time.sleep(3 * idle_seconds)
            assert loaded_models.for_request(model.model_id) is model, "a model writing a reply was unloaded as idle"
        finally:
            busy.stop()
        deadline = time.monotonic() + 30
        while not loaded_models.empty:
            assert time.monotonic() < deadline, "the idle model was not unloaded"
            time.sleep(0.1)
        assert model.engine is None
        # With no model left, the check ends too (it starts again with the next load).
        while any(thread.name == "unload idle models" for thread in threading.enumerate()):
            assert time.monotonic() < deadline, "the idle check went on with no model loaded"
            time.sleep(0.1)
    finally:
        loaded_models.unload()


@pytest.mark.server
def test_the_api_serves_each_loaded_model_by_name_and_loads_a_listed_one_on_demand_never_as_the_default(tmp_path):
    import openai

    app = on_demand_app(tmp_path, "copy")
    try:
        client = openai.OpenAI(base_url=f"{app.url}v1", api_key="unused", max_retries=0, timeout=300)
        # The models loaded, then those a request may load (the embedded one is loaded already).
        assert listed(app) == [("SmolLM2-135M-Instruct", True, ["text"]), ("copy", False, ["text"])]
        asked = {"messages": QUESTION, "temperature": 0, "max_tokens": 6}
        # Listed by the server ("copy" in its models folder) and not loaded: loaded for this request, the other kept,
        # another user answered meanwhile.
        from_copy, other_seconds = while_another_asks(app, lambda: client.chat.completions.create(model="copy", **asked))
        print(f"\na model loaded on demand; another user answered in {other_seconds:.2f} s meanwhile")
        assert from_copy.model == "copy" and other_seconds < ANSWERED_WITHIN
        # The default, which the page's new chats get, is still the operator's: a request's load never changes it.
        assert listed(app) == [("SmolLM2-135M-Instruct", True, ["text"]), ("copy", True, ["text"])]
        assert app.loaded_models.model.model_id == DEFAULT_MODEL
        from_default = client.chat.completions.create(model="SmolLM2-135M-Instruct", **asked)
        assert from_default.model == "SmolLM2-135M-Instruct"
        assert from_default.choices[0].message.content == from_copy.choices[0].message.content, "the same weights, greedy"
        # Neither loaded nor listed: nothing loaded, nothing fetched; the answer names what is served.
        for unknown in ("nonesuch", "http://127.0.0.1:9/v1"):
            with pytest.raises(openai.NotFoundError, match=f"The model '{unknown}' is not served here; this server serves 'SmolLM2-135M-Instruct', 'copy'"):
                client.chat.completions.create(model=unknown, **asked)
        assert len(app.loaded_models.models) == 2
        # Without --load-on-demand, a listed model not loaded is not served.
        app.loaded_models.unload("copy")
        app.loaded_models.keep = app.loaded_models.keep.replace(load_on_demand=False)
        assert listed(app) == [("SmolLM2-135M-Instruct", True, ["text"])]
        with pytest.raises(openai.NotFoundError, match="'copy' is not served here; this server serves 'SmolLM2-135M-Instruct'"):
            client.chat.completions.create(model="copy", **asked)
    finally:
        app.stop()


@pytest.mark.slow
async def test_a_model_whose_reply_waits_on_the_user_or_a_tool_is_never_unloaded_as_idle():
    """A reply that runs tools holds its model from its first answer to its last: while a call
    waits for the user's say and while the tool runs, the model is neither unloaded after its
    idle time nor to make room for another, and another user's request to it is answered."""
    idle_seconds = 0.5
    loaded_models = LoadedModels(keep=KeepSettings(models_memory=64 << 30, idle_unload_minutes=idle_seconds / 60))
    asked_user, answered, running, finished = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()

    class WaitingApproval:
        def asks(self, tool) -> bool:
            return True

        async def decide(self, calls):
            asked_user.set()
            await answered.wait()
            return {call.id: True for call in calls}

    async def slow_calculator(arguments) -> str:
        running.set()
        await finished.wait()
        return "391"

    calculator = BUILTIN_TOOLS["calculator"]
    tools = {"calculator": Tool("calculator", calculator.description, calculator.parameters, slow_calculator)}
    request = ChatRequest.build([{"role": "user", "content": "What is 17 times 23? Use the calculator."}], tools=[calculator.schema()],
                                tool_choice={"type": "function", "function": {"name": "calculator"}}, temperature=0, max_new_tokens=30)
    try:
        model = await asyncio.to_thread(loaded_models.load, named("with-tools"))

        async def whole_reply() -> list:
            return [item async for item in reply_with_tools(model, request, tools, step_limit=2, approval=WaitingApproval())]

        reply = asyncio.create_task(whole_reply())
        await asyncio.wait_for(asked_user.wait(), 120)
        await asyncio.sleep(3 * idle_seconds)
        assert loaded_models.for_request("with-tools") is model, "a model whose reply waits for the user's say was unloaded as idle"
        started = time.monotonic()
        other = await asyncio.to_thread(model.chat, QUESTION, temperature=0, max_new_tokens=4)
        other_seconds = time.monotonic() - started
        assert other[0].response_length == 4 and other_seconds < ANSWERED_WITHIN

        answered.set()
        await asyncio.wait_for(running.wait(), 30)
        await asyncio.sleep(3 * idle_seconds)
        loaded_models.keep = loaded_models.keep.replace(models_memory=1)
        await asyncio.to_thread(loaded_models.load, named("another"))  # past a 1-byte budget: every idle model but the new default goes
        assert loaded_models.for_request("with-tools") is model and model.engine is not None, "a model whose reply runs a tool was unloaded"
        finished.set()
        items = await asyncio.wait_for(reply, 120)
        print(f"\na reply held its model through the user's say and its tool; another user answered in {other_seconds:.2f} s meanwhile")
        assert [item.content for item in items if isinstance(item, ToolResult)] == ["391"]
        assert isinstance(items[-1], Response) and items[-1].finish_reason != "abort", "the reply went on to its last answer"
    finally:
        loaded_models.unload()


@pytest.mark.server
def test_a_load_on_demand_past_the_memory_budget_is_refused_while_the_models_holding_it_are_busy(tmp_path):
    app = on_demand_app(tmp_path, "first", "second")
    try:
        assert ask(app, "first", ATTACKER)[0].status_code == 200
        with_first, files = rss(), default_gguf().stat().st_size
        # Room for another model's files only once "first" is unloaded; the default is never unloaded for a request.
        budget = with_first + files // 2
        app.loaded_models.keep = app.loaded_models.keep.replace(models_memory=budget)
        busy = LongStream(app, "first", ATTACKER)
        try:
            (refused, seconds), other_seconds = while_another_asks(app, lambda: ask(app, "second", ATTACKER))
            during = rss()
            # Room for its files, not for its context and buffers: loaded, measured, and unloaded before any request reaches it.
            app.loaded_models.keep = app.loaded_models.keep.replace(models_memory=with_first + 2 * files)
            measured = ask(app, "second", ATTACKER)[0]
            after_measured = rss()
        finally:
            busy.stop()
        print(f"\na load past the budget refused in {seconds:.2f} s ({refused.status_code}); another user answered in {other_seconds:.2f} s; "
              f"budget {budget / 2**20:.0f} MiB, RSS with two models {with_first / 2**20:.0f} MiB, meanwhile {during / 2**20:.0f} MiB; "
              f"refused once measured ({measured.status_code}): {after_measured / 2**20:.0f} MiB")
        for answer in (refused, measured):
            message = answer.json()["error"]["message"]
            assert answer.status_code == 503 and answer.json()["error"]["code"] == "memory_budget_full" and answer.headers["Retry-After"]
            assert "would pass this server's memory budget" in message and "first (in use)" in message and f"{DEFAULT_MODEL} (the default)" in message
        assert f"Loading second ({files / 2**20:,.0f} MiB)" in refused.json()["error"]["message"], "refused before it loads"
        assert seconds < ANSWERED_WITHIN and other_seconds < ANSWERED_WITHIN
        assert loaded_ids(app.loaded_models) == [DEFAULT_MODEL, "first"] and during <= budget
        assert abs(after_measured - with_first) <= MEMORY_BOUND * with_first

        # Once "first" is idle, it makes room for the other.
        deadline = time.monotonic() + 30
        while app.loaded_models.for_request("first").line.running:
            assert time.monotonic() < deadline, "the closed stream went on"
            time.sleep(0.05)
        assert ask(app, "second", ATTACKER)[0].status_code == 200
        after = rss()
        print(f"then loaded in its place: {after / 2**20:.0f} MiB")
        assert loaded_ids(app.loaded_models) == [DEFAULT_MODEL, "second"] and abs(after - with_first) <= MEMORY_BOUND * with_first
    finally:
        app.stop()


@pytest.mark.server
def test_one_user_loads_only_so_many_models_a_minute(tmp_path):
    app = on_demand_app(tmp_path, "first", "second", "third", flags=("--max-model-loads-per-user", "2"))
    try:
        before = rss()
        for name in ("first", "second"):
            assert ask(app, name, ATTACKER)[0].status_code == 200
        with_two = rss()
        (refused, seconds), other_seconds = while_another_asks(app, lambda: ask(app, "third", ATTACKER))
        print(f"\na third load in a minute refused in {seconds:.2f} s ({refused.status_code}); another user answered in {other_seconds:.2f} s; "
              f"RSS {before / 2**20:.0f} MiB, with the two loads allowed {with_two / 2**20:.0f} MiB, after the refusal {rss() / 2**20:.0f} MiB")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "model_load_rate_limit"
        assert 0 < int(refused.headers["Retry-After"]) <= 60 and "--max-model-loads-per-user 2" in refused.json()["error"]["message"]
        assert seconds < ANSWERED_WITHIN and other_seconds < ANSWERED_WITHIN
        assert "third" not in loaded_ids(app.loaded_models) and rss() - with_two <= MEMORY_BOUND * with_two
        # The limit is each user's: the other user loads it.
        assert ask(app, "third", OTHER_USER)[0].status_code == 200
    finally:
        app.stop()
