"""Multimodal models: the model's own processor turns placeholders and media into model inputs.

Each ``<image>``, ``<video>`` and ``<audio>`` placeholder becomes what the chat template expects
(a content part ``{"type": "image"}`` where the template takes structured content, else the
processor's own media token in the text); the processor then expands each media token into as
many tokens as it computes for that file and builds the pixel values, grids and audio features.
No per-model code: what differs between models lives in their processor and template.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from ..errors import MediaError, ModelLoadError
from ..model_files.model_args import ModelArgs
from ..request import MEDIA_KINDS, PLACEHOLDERS
from .media import describe, open_audio, open_image, open_video
from .media_budget import MediaBudget

_COMPONENT = {"image": "image_processor", "video": "video_processor", "audio": "feature_extractor"}
_SPLIT = re.compile("(" + "|".join(re.escape(tag) for tag in PLACEHOLDERS.values()) + ")")
_KIND_OF_TAG = {tag: kind for kind, tag in PLACEHOLDERS.items()}

_INSTALL_TORCHVISION = "Install the torchvision build that matches your torch (see pytorch.org), then reload the model."
VIDEO_NEEDS_TORCHVISION = (
    "This model takes videos, but transformers' video processors need torchvision, which is not installed. "
    + _INSTALL_TORCHVISION
)


def is_multimodal(config: Any) -> bool:
    """Whether transformers loads this architecture as a multimodal LM (image, video or audio in, text out)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES

    return config.model_type in MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES


class MediaProcessor:
    """A loaded model's processor, with the media settings and what its template takes."""

    def __init__(self, processor: Any, model_args: ModelArgs, unavailable: dict[str, str]) -> None:
        self.processor = processor
        self.model_args = model_args
        self.unavailable = unavailable
        self.tokens = {
            kind: token
            for kind in MEDIA_KINDS
            if kind not in unavailable
            and getattr(processor, _COMPONENT[kind], None) is not None
            and (token := getattr(processor, f"{kind}_token", None))
        }
        self.kinds = frozenset(self.tokens)
        self._part_kinds: dict[str, frozenset[str]] = {}

    @classmethod
    def load(cls, path: str, model_args: ModelArgs) -> MediaProcessor:
        from transformers import AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
            unavailable = {}
        except ImportError as error:
            if "torchvision" not in str(error).lower():
                raise
            processor = _processor_without_video(path, model_args.trust_remote_code)
            unavailable = {"video": VIDEO_NEEDS_TORCHVISION}
        except (OSError, ValueError) as error:
            raise ModelLoadError(
                f"{model_args.display_name} is a multimodal model, but its processor could not be loaded: {error}"
            ) from error
        return cls(processor, model_args, unavailable)

    def check_available(self, media: dict[str, list]) -> None:
        """A kind this model would take but this installation cannot read gets its own reason."""
        for kind in media:
            if kind in self.unavailable:
                raise MediaError(self.unavailable[kind])

    def template_messages(self, messages: list[dict[str, Any]], template: str) -> list[dict[str, Any]]:
        """Messages with each placeholder in the form ``template`` expects."""
        if template not in self._part_kinds:
            tokenizer = self.processor.tokenizer
            self._part_kinds[template] = frozenset(
                kind for kind, token in self.tokens.items() if _template_takes_part(tokenizer, template, kind, token)
            )
        return [self._with_media(message, self._part_kinds[template]) for message in messages]

    def _with_media(self, message: dict[str, Any], part_kinds: frozenset[str]) -> dict[str, Any]:
        content = message["content"]
        if not isinstance(content, str) or not _SPLIT.search(content):
            return message
        parts: list[dict[str, str]] = []
        for piece in _SPLIT.split(content):
            kind = _KIND_OF_TAG.get(piece)
            if kind in part_kinds:
                parts.append({"type": kind})
            elif piece:
                text = self.tokens.get(kind, piece) if kind else piece
                if parts and parts[-1]["type"] == "text":
                    parts[-1] = {"type": "text", "text": parts[-1]["text"] + text}
                else:
                    parts.append({"type": "text", "text": text})
        if all(part["type"] == "text" for part in parts):
            return {**message, "content": "".join(part["text"] for part in parts)}
        return {**message, "content": parts}

    def load_media(self, media: dict[str, list]) -> dict[str, list]:
        """Each file regularised for this model, in the order of its placeholder (read_media)."""
        audio = (self.sampling_rate, *self._audio_limits()) if "audio" in media else None
        return read_media(media, self.model_args, audio)

    @property
    def sampling_rate(self) -> int:
        return int(self.processor.feature_extractor.sampling_rate)

    def model_inputs(self, prompt: str, loaded: dict[str, list], device: Any, dtype: Any) -> tuple[Any, dict[str, Any]]:
        """The prompt's token ids, with each media token expanded, and the processor's media
        tensors (pixel values, grids, audio features) for generate, from media ``load_media`` gave."""
        arguments: dict[str, Any] = {}
        if images := loaded.get("image"):
            arguments["images"] = images
        if videos := loaded.get("video"):
            arguments.update(
                videos=[video.frames for video in videos],
                video_metadata=[video.metadata for video in videos],
                # The frames are sampled already, by our settings; the processor must keep them all.
                do_sample_frames=False,
            )
        if audios := loaded.get("audio"):
            arguments.update(audio=audios, sampling_rate=self.sampling_rate)
        try:
            # The chat template already wrote any special tokens the model wants at the start.
            inputs = self.processor(text=[prompt], add_special_tokens=False, return_tensors="pt", **arguments)
        except (ValueError, TypeError, IndexError) as error:
            raise MediaError(f"The model's processor could not use these media: {error}") from error
        unused = {"input_ids", "attention_mask", *getattr(self.processor, "unused_input_names", ())}
        extra = {
            name: value.to(device, dtype=dtype) if value.is_floating_point() else value.to(device)
            for name, value in inputs.items()
            if name not in unused
        }
        return inputs["input_ids"].to(device), extra

    def check_tokens(self, prompt: str, media: dict[str, list]) -> None:
        """Every file has its token in the rendered prompt and every token its file: a template that
        drops a media part, or a media token typed into a message, would otherwise misalign them."""
        for kind, token in self.tokens.items():
            placed, given = prompt.count(token), len(media.get(kind, ()))
            if placed != given:
                raise MediaError(
                    f"The prompt holds {placed} {kind} token(s) ({token}) for {given} {kind}(s): "
                    + (
                        f"the chat template dropped some {kind}s (it may not take them in every role). Put each "
                        f"{PLACEHOLDERS[kind]} in a user message."
                        if placed < given
                        else f"remove {_typed(kind, token)} from the message text, or give one {kind} for each."
                    )
                )

    def _audio_limits(self) -> tuple[float, str]:
        """The longest clip the model takes, and where that limit comes from."""
        extractor = self.processor.feature_extractor
        # Whisper-style extractors pad or cut every clip to one window: longer audio would be
        # truncated without a word, so it is refused instead.
        window = getattr(extractor, "n_samples", None)
        if window and window / self.sampling_rate < self.model_args.audio_max_seconds:
            return window / self.sampling_rate, "this model hears at most that much per clip"
        return self.model_args.audio_max_seconds, "the audio_max_seconds setting"

def read_media(media: dict[str, list], settings: ModelArgs, audio: tuple[int, float, str] | None) -> dict[str, list]:
    """Each file regularised by engines/prompt/media.py, in the order of its placeholder: RGB images,
    sampled videos (engines.media.Video), and mono audio as ``audio`` says: (sampling rate,
    longest clip in seconds, where that limit comes from). Every file's header is read and
    charged to the request's MediaBudget before any file is decoded."""
    budget = MediaBudget(settings)
    budget.check_counts(media)
    openers = {
        "image": lambda source, name: open_image(source, name, settings.image_max_pixels, budget),
        "video": lambda source, name: open_video(
            source, name, settings.video_fps, settings.video_max_frames, settings.video_max_pixels, budget
        ),
        "audio": lambda source, name: open_audio(source, name, *audio, budget),
    }
    opened: dict[str, list] = {}
    with contextlib.ExitStack() as unread:
        for kind, files in media.items():
            opened[kind] = []
            for i, source in enumerate(files):
                opened[kind].append(file := openers[kind](source, describe(kind, i, source)))
                unread.callback(file.close)
        unread.pop_all()
    return {kind: [file.read() for file in files] for kind, files in opened.items()}


def _typed(kind: str, token: str) -> str:
    """What to look for in the text: the placeholder people type, and the model's own token where it differs."""
    placeholder = PLACEHOLDERS[kind]
    return placeholder if token == placeholder else f"{placeholder} (or {token})"


def _template_takes_part(tokenizer: Any, template: str, kind: str, token: str) -> bool:
    """Whether the template renders a ``{"type": kind}`` content part as the processor's token."""
    probe = [{"role": "user", "content": [{"type": kind}, {"type": "text", "text": "?"}]}]
    try:
        rendered = tokenizer.apply_chat_template(probe, chat_template=template, tokenize=False, add_generation_prompt=True)
    except Exception:  # a template written for plain strings may fail on a list in any way
        return False
    return token in rendered


def _processor_without_video(path: str, trust_remote_code: bool) -> Any:
    """The model's processor without its video processor, which transformers cannot build
    without torchvision, so that images (and audio) still work."""
    import transformers
    from transformers.processing_utils import ProcessorMixin

    processor_dict, _ = ProcessorMixin.get_processor_dict(path, trust_remote_code=trust_remote_code)
    processor_class = getattr(transformers, processor_dict.get("processor_class") or "", None)
    if processor_class is None or "video_processor" not in processor_class.get_attributes():
        raise ModelLoadError(f"This model's processor needs torchvision, which is not installed. {_INSTALL_TORCHVISION}")

    class WithoutVideo(processor_class):
        # The base class's __init__ still takes video_processor=None; only the parts that are
        # loaded and checked are narrowed. The engine refuses videos before they reach it.
        @classmethod
        def get_attributes(cls) -> list[str]:
            return [name for name in super().get_attributes() if name != "video_processor"]

    return WithoutVideo.from_pretrained(path, trust_remote_code=trust_remote_code)
