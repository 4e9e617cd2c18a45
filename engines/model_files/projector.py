"""Multimodal projectors (``mmproj*.gguf``): the image or audio encoder llama.cpp pairs with a GGUF
model, found beside it as llama.cpp, LM Studio and Hugging Face repositories lay them out.

Only GGUF metadata is read here (never weights: gguf_header.py), so it is quick enough for the model picker.
A projector fits a model when its output width (``clip.*.projection_dim``) is the model's
embedding width; libmtmd checks nothing more, and a projector of another width would be refused
by it only with a log line, so the pairing is checked here, with a message that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError
from .gguf_header import GgufModel, read_fields

# What each encoder of a projector lets the model read: video is read as frames, so it comes
# with images.
_ENCODERS = {"vision": ("image", "video"), "audio": ("audio",)}


@dataclass(frozen=True)
class Projector:
    path: Path
    projector_type: str
    kinds: tuple[str, ...]
    width: int | None


def find_projector(model: Path, named: str | None = None, width: int | None = None) -> Projector | None:
    """The projector for ``model`` (whose embedding ``width`` is read from its header unless given):
    the one ``named``, else the ``mmproj*.gguf`` beside it whose width fits (None where there is
    none). Raises ModelLoadError for a named file that is no projector or does not fit."""
    if not model.is_file():
        raise ModelLoadError(f"{model} does not exist.")
    if named:
        projector = read_projector(Path(named).expanduser())
        if projector is None:
            raise ModelLoadError(f"{named} is not a multimodal projector (an mmproj GGUF file); give the mmproj file that came with {model.name}.")
        check_pair(model, width or GgufModel.read(model).embedding_width, projector)
        return projector
    found = [projector for path in sorted(model.parent.glob("mmproj*.gguf"), key=lambda path: path.name.lower())
             if (projector := read_projector(path)) is not None]
    if not found:
        return None
    width = width or GgufModel.read(model).embedding_width
    fitting = [projector for projector in found if projector.width in (None, width)]
    if not fitting:
        names = ", ".join(projector.path.name for projector in found)
        raise ModelLoadError(
            f"{names} beside {model.name} {'is' if len(found) == 1 else 'are'} for another model: "
            f"{found[0].path.name} makes {found[0].width}-wide embeddings, {model.name} takes {width}. "
            "Put the projector that came with this model beside it, or name it with the mmproj setting."
        )
    return fitting[0]


def check_pair(model: Path, width: int | None, projector: Projector) -> None:
    if None not in (width, projector.width) and width != projector.width:
        raise ModelLoadError(
            f"The projector {projector.path.name} does not fit {model.name}: it makes {projector.width}-wide embeddings "
            f"and the model takes {width}. Use the mmproj file published with this model."
        )


def read_projector(path: Path) -> Projector | None:
    """The projector's type, the media it reads and its output width; None if ``path`` is no projector."""
    fields = read_fields(path, ("general.type", "general.architecture", "clip.projector_type", "clip.has_vision_encoder",
                              "clip.has_audio_encoder", "clip.vision.projection_dim", "clip.audio.projection_dim"))
    if fields is None or (fields.get("general.type") != "mmproj" and fields.get("general.architecture") != "clip"):
        return None
    kinds = tuple(kind for encoder, encoder_kinds in _ENCODERS.items() if fields.get(f"clip.has_{encoder}_encoder")
                  for kind in encoder_kinds)
    width = fields.get("clip.vision.projection_dim") or fields.get("clip.audio.projection_dim")
    return Projector(path, str(fields.get("clip.projector_type", "unknown")), kinds, width)
