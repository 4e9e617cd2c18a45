"""Finding the models on this machine: the embedded one, a models folder, the Hugging Face cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from engines.model_files import catalog as model_catalog
from engines.model_files.catalog import FoundModel, find_models
from engines.model_files.paths import default_gguf
from tests.hub_cache import cache_model
from harness.tiny_models import build_qwen2_audio
from webui.model_picker import label

TEXT_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}


def model_dir(path: Path, config: dict | str, weights: int = 1000, **files: dict) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    (path / "model.safetensors").write_bytes(b"\0" * weights)
    for name, content in files.items():
        (path / f"{name}.json").write_text(json.dumps(content))
    return path


def by_name(models: list[FoundModel]) -> dict[str, FoundModel]:
    return {model.name: model for model in models}


@pytest.fixture
def no_hub_cache(tmp_path):
    return tmp_path / "no-cache"


def test_the_embedded_model_comes_first_and_fills_the_field_with_nothing(no_hub_cache):
    [embedded] = find_models(None, no_hub_cache)
    assert embedded == FoundModel("", "SmolLM2-135M-Instruct", "embedded", "GGUF", default_gguf().stat().st_size, ())
    assert label(embedded) == "SmolLM2-135M-Instruct · embedded · GGUF · 93.8 MB · reads text"


def test_a_models_folder_lists_gguf_files_and_model_directories_with_what_they_read(tmp_path, no_hub_cache):
    models = tmp_path / "models"
    (models / "gguf").mkdir(parents=True)
    (models / "gguf" / "SmolLM2-copy.gguf").symlink_to(default_gguf())
    model_dir(models / "org" / "plain", TEXT_CONFIG, weights=3000)
    model_dir(models / "org" / "vision", {"model_type": "qwen2_vl", "vision_config": {}, "image_token_id": 5, "video_token_id": 6})
    # Older checkpoints name their processor parts in files of their own.
    model_dir(models / "older-vision", TEXT_CONFIG, preprocessor_config={"image_processor_type": "CLIPImageProcessor"},
              video_preprocessor_config={"video_processor_type": "X"})
    build_qwen2_audio(models / "tiny-audio")
    found = by_name(find_models(models, no_hub_cache)[1:])
    assert found["gguf/SmolLM2-copy"] == FoundModel(str(models / "gguf" / "SmolLM2-copy.gguf"), "gguf/SmolLM2-copy", "models folder",
                                                      "GGUF", default_gguf().stat().st_size, ())
    plain = found["org/plain"]
    assert (plain.value, plain.format, plain.reads) == (str(models / "org" / "plain"), "HF", ())
    assert plain.size == 3000 + len(json.dumps(TEXT_CONFIG))
    assert found["org/vision"].reads == ("images", "video")
    assert found["older-vision"].reads == ("images", "video")
    assert found["tiny-audio"].reads == ("audio",)
    assert label(found["org/vision"]).endswith("· models folder · HF · 1.1 KB · reads text, images, video")


def test_split_ggufs_are_one_model_and_projectors_none(tmp_path, no_hub_cache):
    models = tmp_path / "models"
    models.mkdir()
    for part in (1, 2, 3):
        (models / f"Big-Q4_K_M-{part:05d}-of-00003.gguf").write_bytes(b"\0" * 100 * part)
    (models / "mmproj-vision-f16.gguf").write_bytes(b"\0" * 10)
    (models / "notes.txt").write_text("not a model")
    assert find_models(models, no_hub_cache)[1:] == [
        FoundModel(str(models / "Big-Q4_K_M-00001-of-00003.gguf"), "Big-Q4_K_M-00001-of-00003", "models folder", "GGUF", 600, ()),
    ]


def test_unreadable_entries_are_left_out_or_described_less(tmp_path, no_hub_cache, monkeypatch):
    models = tmp_path / "models"
    model_dir(models / "bad-config", "{not json", weights=10)
    (models / "broken-link.gguf").symlink_to(tmp_path / "gone.gguf")
    (models / "loop").mkdir()
    (models / "loop" / "again").symlink_to(models)  # a link back up: the depth limit ends the walk
    (models / "locked").mkdir()
    model_dir(models / "locked" / "hidden-model", TEXT_CONFIG)
    (models / "deep" / "a" / "b").mkdir(parents=True)
    model_dir(models / "deep" / "a" / "b" / "too-deep", TEXT_CONFIG)
    real_scandir = os.scandir

    def scandir(path):  # root reads every folder, so a folder without permission is made up here
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(model_catalog.os, "scandir", scandir)
    found = find_models(models, no_hub_cache)[1:]
    assert [(model.name, model.reads) for model in found] == [("bad-config", None), ("loop/again/bad-config", None)]
    assert label(found[0]) == "bad-config · models folder · HF · 19 bytes"


def test_a_large_folder_is_scanned_quickly(tmp_path, no_hub_cache):
    models = tmp_path / "models"
    for folder in range(200):
        data = models / f"dataset-{folder}" / "shards"
        data.mkdir(parents=True)
        for shard in range(20):
            (data / f"{shard}.parquet").write_bytes(b"")
    model_dir(models / "one-model", TEXT_CONFIG)
    started = time.perf_counter()
    found = find_models(models, no_hub_cache)
    assert time.perf_counter() - started < 1
    assert [model.name for model in found] == ["SmolLM2-135M-Instruct", "one-model"]


def test_the_hugging_face_cache_lists_models_by_name_and_its_gguf_files(tmp_path):
    cache, sources = tmp_path / "hub", tmp_path / "sources"
    plain = model_dir(sources / "plain", TEXT_CONFIG, weights=5000)
    snapshot = cache_model(cache, "org/Plain-Model", plain)
    vision = model_dir(sources / "vision", {"model_type": "llava", "image_token_index": 32000})
    pinned = cache_model(cache, "org/Pinned-Vision", vision, ref=None)
    ggufs = sources / "ggufs"
    ggufs.mkdir()
    (ggufs / "Model-Q4_0.gguf").write_bytes(b"\0" * 700)
    (ggufs / "README.md").write_text("readme")
    gguf_snapshot = cache_model(cache, "org/Model-GGUF", ggufs)
    cache_model(cache, "org/some-dataset", plain, repo_type="dataset")
    (cache / "models--org--corrupted").mkdir()  # no snapshots folder: huggingface_hub reports it, we skip it

    found = by_name(find_models(None, cache)[1:])
    assert list(found) == ["org/Model-GGUF/Model-Q4_0", "org/Pinned-Vision", "org/Plain-Model"]
    # A revision the cache finds by name (its main ref) is loaded by name, offline too.
    assert found["org/Plain-Model"] == FoundModel("org/Plain-Model", "org/Plain-Model", "HF cache", "HF",
                                                  5000 + len(json.dumps(TEXT_CONFIG)), ())
    assert (snapshot / "config.json").is_file()
    assert found["org/Pinned-Vision"].value == str(pinned) and found["org/Pinned-Vision"].reads == ("images",)
    gguf = found["org/Model-GGUF/Model-Q4_0"]
    assert (gguf.value, gguf.format, gguf.size) == (str(gguf_snapshot / "Model-Q4_0.gguf"), "GGUF", 700)


def test_a_missing_cache_or_folder_finds_only_the_embedded_model(tmp_path):
    assert [model.where for model in find_models(tmp_path / "no-models", tmp_path / "no-cache")] == ["embedded"]
