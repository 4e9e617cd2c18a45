"""The models on this machine: the embedded default, a models folder, and the Hugging Face cache.

Scanning reads directory listings, file sizes and small JSON configs only, never weights, so it
takes milliseconds and can run whenever the page opens. Whatever cannot be read (a folder without
permission, a broken link, a config that is not JSON) is left out or described less, never an error.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError
from .model_args import EMBEDDED_MODEL_NAME
from .paths import default_gguf
from .projector import find_projector

logger = logging.getLogger(__name__)

# models/<name>/, models/<org>/<name>/ and one level more is where people put them; deeper
# folders are datasets or checkouts, and walking them would make the scan slow.
MAX_DEPTH = 3
MEDIA = ("images", "video", "audio")
# Config keys of transformers' multimodal architectures: the token a medium becomes, or its encoder.
_CONFIG_KEYS = {
    "images": ("image_token_id", "image_token_index", "vision_config"),
    "video": ("video_token_id", "video_token_index"),
    "audio": ("audio_token_id", "audio_token_index", "audio_config"),
}
# The processor's components, as processor_config.json (transformers 5) names them.
_PROCESSOR_PARTS = {"images": "image_processor", "video": "video_processor", "audio": "feature_extractor"}
# Only the first file of a split GGUF is opened; llama.cpp finds the others beside it.
_GGUF_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class FoundModel:
    """A model the Model field can load: ``value`` is what to put there ("" for the embedded one).
    ``reads`` is what it takes besides text, or None where its files do not say."""

    value: str
    name: str
    where: str
    format: str
    size: int
    reads: tuple[str, ...] | None


def find_models(models_dir: Path | None, hub_cache: Path | None = None) -> list[FoundModel]:
    """Every model found: the embedded one first, then the models folder's, then the cache's."""
    return [*_embedded(), *(_in_folder(models_dir) if models_dir else []), *_in_hub_cache(hub_cache)]


def _embedded() -> list[FoundModel]:
    try:
        path = default_gguf()
    except ModelLoadError:
        return []
    return [FoundModel("", EMBEDDED_MODEL_NAME, "embedded", "GGUF", _size(path), ())]


def _in_folder(root: Path) -> list[FoundModel]:
    found = []
    for path in _walk(root, MAX_DEPTH):
        name = str(path.relative_to(root))
        if path.is_file():
            found.append(FoundModel(str(path), name.removesuffix(path.suffix), "models folder", "GGUF", _gguf_size(path), _gguf_reads(path)))
        else:
            found.append(FoundModel(str(path), name, "models folder", "HF", _size(path), _reads(path)))
    return found


def _walk(folder: Path, depth: int) -> list[Path]:
    """GGUF files and model directories (those with a config.json) under ``folder``, links followed."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name.lower())
    except OSError as error:
        logger.debug("Not scanning %s: %s", folder, error)
        return []
    found = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        try:
            if entry.is_file() and _is_model_gguf(entry.name):
                found.append(path)
            elif entry.is_dir():
                if (path / "config.json").is_file():
                    found.append(path)
                elif depth > 1:
                    found.extend(_walk(path, depth - 1))
        except OSError as error:
            logger.debug("Skipping %s: %s", path, error)
    return found


def _is_model_gguf(name: str) -> bool:
    lower = name.lower()
    # A multimodal projector (mmproj) is half of a vision model, not a model llama.cpp can chat with.
    if not lower.endswith(".gguf") or lower.startswith("mmproj"):
        return False
    part = _GGUF_PART.search(lower)
    return part is None or int(part.group(1)) == 1


def _in_hub_cache(hub_cache: Path | None) -> list[FoundModel]:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(hub_cache)
    except (CacheNotFound, OSError) as error:
        logger.debug("No Hugging Face cache to scan: %s", error)
        return []
    found = []
    for repo in sorted(cache.repos, key=lambda repo: repo.repo_id.lower()):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda revision: ("main" in revision.refs, revision.last_modified))
        snapshot = revision.snapshot_path
        if (snapshot / "config.json").is_file():
            # By name where the cache can find it again (its main ref); else by its folder.
            value = repo.repo_id if "main" in revision.refs else str(snapshot)
            found.append(FoundModel(value, repo.repo_id, "HF cache", "HF", revision.size_on_disk, _reads(snapshot)))
        for file in sorted(revision.files, key=lambda file: file.file_name):
            if _is_model_gguf(file.file_name):
                found.append(FoundModel(str(file.file_path), f"{repo.repo_id}/{file.file_path.stem}", "HF cache", "GGUF",
                                        file.size_on_disk, _gguf_reads(file.file_path)))
    return found


def _size(path: Path) -> int:
    """Bytes of a file, or of the files under a directory (file links followed: cache snapshots link to blobs)."""
    if path.is_file():
        return _file_size(path)
    return sum(_file_size(Path(folder, name)) for folder, _, names in os.walk(path) for name in names)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _gguf_size(first_part: Path) -> int:
    part = _GGUF_PART.search(first_part.name)
    if part is None:
        return _file_size(first_part)
    prefix = glob.escape(first_part.name[: part.start()])
    return sum(_file_size(file) for file in first_part.parent.glob(f"{prefix}-*-of-{part.group(2)}.gguf"))


def _gguf_reads(model: Path) -> tuple[str, ...] | None:
    """The media a GGUF model reads through the projector beside it (llama.cpp pairs them as one
    model); None where that cannot be told."""
    try:
        projector = find_projector(model)
    except ModelLoadError:
        return None
    kinds = projector.kinds if projector else ()
    return tuple(kind for kind in MEDIA if kind.removesuffix("s") in kinds)


def _reads(model_dir: Path) -> tuple[str, ...] | None:
    """The media a HF model directory takes, from its config and processor files; None if its config is unreadable."""
    config = _json(model_dir / "config.json")
    if config is None:
        return None
    processor = _json(model_dir / "processor_config.json") or {}
    preprocessor = _json(model_dir / "preprocessor_config.json") or {}
    reads = set()
    for kind in MEDIA:
        if any(key in config for key in _CONFIG_KEYS[kind]) or _PROCESSOR_PARTS[kind] in processor:
            reads.add(kind)
    # Older checkpoints keep each processor part in a file of its own.
    if (model_dir / "video_preprocessor_config.json").is_file():
        reads.add("video")
    if "feature_extractor_type" in preprocessor:
        reads.add("audio")
    elif "image_processor_type" in preprocessor:
        reads.add("images")
    return tuple(kind for kind in MEDIA if kind in reads)


def _json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
