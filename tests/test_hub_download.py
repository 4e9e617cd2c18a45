"""Hub models: found in the cache offline, or refused at once with a message saying how to get them.

No test here can download (the machine has no network); the download itself is huggingface_hub's
snapshot_download, and its progress reaches the page through the tqdm class tested below.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from huggingface_hub import constants

from engines import ConfigError, ModelLoadError
from engines.model_files.hub_download import _page_bars
from engines.model_files.paths import resolve_model_path
from tests.hub_cache import cache_model

MISSING = "HuggingFaceTB/SmolLM2-360M-Instruct"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def refused_quickly(name: str) -> str:
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as refused:
        resolve_model_path(name)
    assert time.perf_counter() - started < 5, "the refusal took seconds: it should not wait for the network"
    return str(refused.value)


def test_offline_a_model_not_in_the_cache_is_refused_at_once_with_how_to_get_it(hub_cache, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    message = refused_quickly(MISSING)
    assert message.startswith(f"{MISSING} is not on this machine (the Hugging Face cache is {hub_cache})")
    assert "HF_HUB_OFFLINE is set" in message and "unset HF_HUB_OFFLINE and load it again" in message
    assert f"`hf download {MISSING}`" in message and "models--HuggingFaceTB--SmolLM2-360M-Instruct" in message
    assert "local directory or .gguf file" in message


def test_without_network_the_same_is_said_of_the_hub(hub_cache, monkeypatch):
    with socket.socket() as closed:  # a port nothing listens on: connecting fails at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    message = refused_quickly(MISSING)
    assert f"{MISSING} is not on this machine" in message and "the Hugging Face Hub cannot be reached" in message
    assert "connect this machine to the network and load it again" in message


def test_offline_a_cached_model_is_its_snapshot_folder(hub_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for name, weights in (("safetensors", "model.safetensors"), ("pickles", "pytorch_model.bin")):
        source = tmp_path / name
        source.mkdir()
        (source / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (source / weights).write_bytes(b"\0" * 10)
        snapshot = cache_model(hub_cache, f"org/{name}", source)
        assert resolve_model_path(f"org/{name}") == str(snapshot)


def test_a_cached_repo_of_gguf_files_is_not_taken_for_a_model_directory(hub_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    source = tmp_path / "ggufs"
    source.mkdir()
    (source / "Model-Q4_0.gguf").write_bytes(b"\0" * 10)
    cache_model(hub_cache, "org/Model-GGUF", source)
    with pytest.raises(ConfigError, match="org/Model-GGUF on the Hugging Face Hub has no config.json.*load it by its path"):
        resolve_model_path("org/Model-GGUF")


def test_a_name_that_is_no_hub_name_says_so():
    with pytest.raises(ConfigError, match="bad name! is not a local path, and not a Hub model name like org/name"):
        resolve_model_path("bad name!")


def test_download_progress_reaches_the_load_progress():
    reports = []
    bars = _page_bars("org/model", lambda fraction, message: reports.append((fraction, message)))
    # What snapshot_download does with its byte bar: the total grows as files are listed.
    with bars(desc="Downloading bytes", total=0, unit="B", unit_scale=True) as bar:
        bar.total = 2_000_000
        for received in (500_000, 1_500_000):
            time.sleep(0.15)  # tqdm redraws at most every 0.1 s
            bar.update(received)
    # Each whole percent once: closing the bar at 100 % repeats nothing.
    assert reports == [(0.25, "Downloading org/model: 500kB of 2.00MB"), (1.0, "Downloading org/model: 2.00MB of 2.00MB")]
    shown = len(reports)
    with bars(desc="Fetching 3 files", total=3) as files:  # counts files, not bytes: not shown
        files.update(3)
    assert len(reports) == shown
