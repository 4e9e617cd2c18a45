"""The embedded model's GGUF conversion cache, and model path resolution."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from engines import ConfigError
from engines.model_files import gguf as conversion
from engines.model_files.cache import COMPLETE_MARKER
from engines.model_files.gguf import converted_gguf_dir
from engines.model_files.paths import default_gguf, resolve_model_path


def test_second_load_uses_the_cache_without_converting(chat_model, monkeypatch):
    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again although the cache is complete")

    monkeypatch.setattr(conversion, "_convert", no_conversion)
    started = time.perf_counter()
    path = resolve_model_path(None)
    assert time.perf_counter() - started < 1
    assert path == chat_model.engine.model_path
    assert (Path(path) / COMPLETE_MARKER).is_file()


@pytest.mark.slow
def test_half_written_cache_is_ignored_and_redone(tmp_path, monkeypatch, default_model_dir):
    monkeypatch.setenv("ANYCHAT_CACHE_DIR", str(tmp_path))
    gguf = default_gguf()
    converted = []
    real_convert = conversion._convert
    monkeypatch.setattr(conversion, "_convert", lambda *a, **k: (converted.append(1), real_convert(*a, **k)))
    # What an interrupted run leaves: the target without its marker, with a truncated weights file.
    # Copied from the session's finished conversion of the same GGUF (the same folder name), not
    # converted a first time here: that conversion is what the test does not look at.
    first = tmp_path / "converted" / Path(default_model_dir).name
    shutil.copytree(default_model_dir, first, ignore=shutil.ignore_patterns(COMPLETE_MARKER, "model.safetensors"))
    (first / "model.safetensors").write_bytes(b"truncated")
    messages = []
    again = converted_gguf_dir(gguf, progress=lambda fraction, message: messages.append(message))
    assert again == first and len(converted) == 1
    assert (again / COMPLETE_MARKER).is_file()
    assert (again / "model.safetensors").stat().st_size > 100e6
    assert any("Converting" in m for m in messages), "conversion must report progress"
    assert not [p for p in again.parent.iterdir() if p.name.startswith(".partial-")]


def test_bad_paths_are_refused(tmp_path):
    # Hub names are tests/test_hub_download.py's.
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model_path("./missing-model")
    with pytest.raises(ConfigError, match="No GGUF file"):
        resolve_model_path(str(tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError, match="config.json"):
        resolve_model_path(str(tmp_path))


def test_a_gguf_path_loads_through_the_same_cache(chat_model):
    gguf = str(default_gguf())
    assert resolve_model_path(gguf) == chat_model.engine.model_path


def test_a_local_model_is_named_by_its_file_not_its_path(tmp_path):
    from engines.model_files.model_args import ModelArgs

    model = tmp_path / "models" / "my-model.gguf"
    model.parent.mkdir()
    model.symlink_to(default_gguf())
    named = ModelArgs(model_name_or_path=str(model))
    assert (named.display_name, named.model_id) == ("my-model.gguf", "my-model")
    assert ModelArgs(model_name_or_path="org/name").display_name == "org/name"
    assert ModelArgs().display_name == "SmolLM2-135M-Instruct (embedded)"
