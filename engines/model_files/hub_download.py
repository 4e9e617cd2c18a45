"""Hub models: their files brought onto this machine with progress, or a clear message why not.

huggingface_hub's snapshot_download does the work: it downloads into the Hugging Face cache, and
when the Hub cannot be reached (HF_HUB_OFFLINE, no network) it falls back to the cached copy at
once. Loading then reads the local snapshot, so no backend fetches anything on its own.
"""

from __future__ import annotations

import io
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from tqdm import tqdm

from ..errors import ConfigError, ModelLoadError
from . import Progress

# Weights in formats no backend here loads, and original checkpoints kept beside the converted
# ones: together often larger than the model that is loaded.
NOT_LOADED = ["*.gguf", "*.onnx", "*.onnx_data", "onnx/*", "*.msgpack", "*.h5", "*.tflite", "*.ot",
              "*.mlmodel", "*.mlpackage/*", "openvino/*", "original/*", "*.pth"]
# PyTorch pickles, fetched only for repos without safetensors: many repos hold both.
PICKLES = ["*.bin", "*.pt"]


def local_hub_model(repo_id: str, progress: Progress | None = None) -> str:
    """The local snapshot directory of Hub model ``repo_id``, downloaded first where needed."""
    path = _download(repo_id, [*NOT_LOADED, *PICKLES], progress)
    if not any(Path(path).rglob("*.safetensors")):
        path = _download(repo_id, NOT_LOADED, progress)
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(
            f"{repo_id} on the Hugging Face Hub has no config.json, so it is not a transformers model. For a repo of "
            "GGUF files, download the .gguf file you want (`hf download REPO FILE.gguf`) and load it by its path."
        )
    return path


def _download(repo_id: str, ignore_patterns: list[str], progress: Progress | None) -> str:
    try:
        return snapshot_download(repo_id, ignore_patterns=ignore_patterns, tqdm_class=_page_bars(repo_id, progress) if progress else None)
    except HFValidationError as error:
        raise ConfigError(f"{repo_id} is not a local path, and not a Hub model name like org/name: {error}") from None
    except LocalEntryNotFoundError as error:
        raise ModelLoadError(_not_on_this_machine(repo_id, isinstance(error, IncompleteSnapshotError))) from error
    except GatedRepoError:
        raise ModelLoadError(
            f"{repo_id} is gated on the Hugging Face Hub: accept its terms on https://huggingface.co/{repo_id}, "
            "then log in on this machine with `hf auth login` and load it again."
        ) from None
    except RepositoryNotFoundError:
        raise ModelLoadError(
            f"There is no model {repo_id} on the Hugging Face Hub, nor a local path of that name. Check the name "
            "(a private model needs `hf auth login` first), or give the path of a local directory or .gguf file."
        ) from None
    except HfHubHTTPError as error:
        raise ModelLoadError(f"The Hugging Face Hub refused to send {repo_id}: {error}") from None


def _not_on_this_machine(repo_id: str, partly: bool = False) -> str:
    here = "only partly on this machine" if partly else "not on this machine"
    if constants.is_offline_mode():
        why, retry = "HF_HUB_OFFLINE is set, so nothing is downloaded", "unset HF_HUB_OFFLINE and load it again"
    else:
        why, retry = "the Hugging Face Hub cannot be reached", "connect this machine to the network and load it again"
    return (
        f"{repo_id} is {here} (the Hugging Face cache is {constants.HF_HUB_CACHE}), and {why}. "
        f"To get it: {retry} (the download shows its progress here); or, on a machine with network, run "
        f"`hf download {repo_id}` and copy its {repo_folder_name(repo_id=repo_id, repo_type='model')} folder into "
        "the cache here; or load a local directory or .gguf file instead."
    )


def _page_bars(repo_id: str, progress: Progress) -> type[tqdm]:
    """A tqdm class for snapshot_download that hands its byte counts to ``progress`` instead of a terminal."""

    class PageBar(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            self.shown: int | None = None
            super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        # tqdm calls display at most every mininterval (0.1 s); passing on whole percents only
        # keeps a long download's progress in a terminal (server start-up) to a hundred lines.
        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            percent = int(100 * self.n / self.total) if self.unit == "B" and self.total else None
            if percent is not None and percent != self.shown:
                self.shown = percent
                progress(min(self.n / self.total, 1.0),
                         f"Downloading {repo_id}: {self.format_sizeof(self.n)}B of {self.format_sizeof(self.total)}B")
            return True

    return PageBar
