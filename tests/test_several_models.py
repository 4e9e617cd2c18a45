"""Several models loaded at once (engines/model_slot.py), on llama.cpp and the embedded GGUF under
other names: kept within a memory budget, the least recently used idle one unloaded first and its
memory given back, a busy one never; an idle model unloaded after its time; the API serving each
loaded model by its name, and loading a model the server lists where the operator lets requests."""

from __future__ import annotations

import gc
import threading
import time

import httpx
import psutil
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)", exc_type=ImportError)

from engines import KeepSettings, ModelSlot  # noqa: E402
from engines.model_files.paths import default_gguf  # noqa: E402
from harness.app_in_process import AppInProcess  # noqa: E402
from harness.engine_contract import QUESTION  # noqa: E402
from tests.api_samples import COUNTING  # noqa: E402

# A small context: the KV cache of each is filled in no time, and four fit easily.
LLAMACPP = {"infer_backend": "llamacpp", "max_model_len": 1024}
# The share of an unloaded model's memory that may stay (as for unload, tests/test_llamacpp_engine.py).
UNLOAD_LEFT_BEHIND = 0.25


def named(model_id: str) -> dict:
    return {**LLAMACPP, "served_model_name": model_id}


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def loaded_ids(slot: ModelSlot) -> list[str]:
    return [model.model_id for model in slot.models]


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


@pytest.mark.slow
def test_a_memory_budget_keeps_models_loaded_and_unloads_the_least_recently_used_idle_one():
    slot = ModelSlot(keep=KeepSettings(models_memory=64 << 30))
    try:
        first = slot.load(named("first"))
        before = rss()
        second = slot.load(named("second"))
        footprint = rss() - before
        assert footprint > 50 * 2**20, f"a second model should take memory of its own: {footprint / 2**20:.0f} MiB"
        assert loaded_ids(slot) == ["second", "first"] and slot.model is second, "the model loaded last is the default"
        assert "Also loaded: first." in slot.describe()
        # Each answers by its id, loaded once: the engines are those loaded.
        assert slot.get("first") is first and slot.get("nonesuch") is None
        assert first.chat(QUESTION, temperature=0, max_new_tokens=4)[0].response_length == 4
        assert second.chat(QUESTION, temperature=0, max_new_tokens=4)[0].response_length == 4

        # Over the budget, the least recently used idle model is unloaded: "second", as "first" was asked since.
        with_two = rss()
        slot.keep = KeepSettings(models_memory=with_two + footprint // 2)
        third = slot.load(named("third"))
        assert loaded_ids(slot) == ["third", "first"] and second.engine is None
        after = rss()
        print(f"\ntwo models {with_two / 2**20:.0f} MiB, one model's {footprint / 2**20:.0f} MiB; "
              f"a third loaded and the least recently used unloaded: {after / 2**20:.0f} MiB")
        assert after - with_two < UNLOAD_LEFT_BEHIND * footprint, (
            f"unloading the least recently used left {(after - with_two) / 2**20:.0f} MiB of a model's {footprint / 2**20:.0f} MiB behind")

        # A model writing a reply stays, even over the budget; the idle one goes.
        busy = Busy(first)
        try:
            slot.keep = KeepSettings(models_memory=1)
            slot.load(named("fourth"))
            assert loaded_ids(slot) == ["fourth", "first"] and third.engine is None and first.engine is not None
        finally:
            busy.stop()
    finally:
        slot.unload()
    assert not slot.loaded and first.engine is None


@pytest.mark.slow
def test_an_idle_model_is_unloaded_after_its_time_and_a_busy_one_is_not():
    idle_seconds = 1.0
    slot = ModelSlot(keep=KeepSettings(idle_unload_minutes=idle_seconds / 60))
    try:
        model = slot.load(LLAMACPP)
        busy = Busy(model)
        try:
            time.sleep(3 * idle_seconds)
            assert slot.get(model.model_id) is model, "a model writing a reply was unloaded as idle"
        finally:
            busy.stop()
        deadline = time.monotonic() + 30
        while slot.loaded:
            assert time.monotonic() < deadline, "the idle model was not unloaded"
            time.sleep(0.1)
        assert model.engine is None
        # With no model left, the check ends too (it starts again with the next load).
        while any(thread.name == "unload idle models" for thread in threading.enumerate()):
            assert time.monotonic() < deadline, "the idle check went on with no model loaded"
            time.sleep(0.1)
    finally:
        slot.unload()


@pytest.mark.server
def test_the_api_serves_each_loaded_model_by_name_and_loads_a_listed_one_on_demand(tmp_path):
    import openai

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "copy.gguf").symlink_to(default_gguf())
    app = AppInProcess(tmp_path, ("api", "--backend", "llamacpp", "--models-memory", "64gb",
                                  "--load-on-demand", "--models-dir", str(folder)))
    try:
        client = openai.OpenAI(base_url=f"{app.url}v1", api_key="unused", max_retries=0, timeout=300)
        # The models loaded, then those a request may load (the embedded one is loaded already).
        assert listed(app) == [("SmolLM2-135M-Instruct", True, ["text"]), ("copy", False, ["text"])]
        asked = {"messages": QUESTION, "temperature": 0, "max_tokens": 6}
        # Listed by the server ("copy" in its models folder) and not loaded: loaded for this request, the other kept.
        from_copy = client.chat.completions.create(model="copy", **asked)
        assert from_copy.model == "copy"
        assert listed(app) == [("copy", True, ["text"]), ("SmolLM2-135M-Instruct", True, ["text"])]
        from_default = client.chat.completions.create(model="SmolLM2-135M-Instruct", **asked)
        assert from_default.model == "SmolLM2-135M-Instruct"
        assert from_default.choices[0].message.content == from_copy.choices[0].message.content, "the same weights, greedy"
        # Neither loaded nor listed: nothing loaded, nothing fetched; the answer names what is served.
        for unknown in ("nonesuch", "http://127.0.0.1:9/v1"):
            with pytest.raises(openai.NotFoundError, match=f"The model '{unknown}' is not served here; this server serves 'copy', 'SmolLM2-135M-Instruct'"):
                client.chat.completions.create(model=unknown, **asked)
        assert len(app.slot.models) == 2
        # Without --load-on-demand, a listed model not loaded is not served.
        app.slot.unload("copy")
        app.slot.keep = app.slot.keep.replace(load_on_demand=False)
        assert listed(app) == [("SmolLM2-135M-Instruct", True, ["text"])]
        with pytest.raises(openai.NotFoundError, match="'copy' is not served here; this server serves 'SmolLM2-135M-Instruct'"):
            client.chat.completions.create(model="copy", **asked)
    finally:
        app.stop()
