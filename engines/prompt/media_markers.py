"""Media for runtimes that take them by a marker in the prompt's text (llama.cpp's libmtmd).

Each ``<image>``, ``<video>`` and ``<audio>`` placeholder becomes the runtime's marker, as text, and
the chat template renders it like any other text (as llama-server does); the runtime then puts the
model's own media tokens around each file itself. The files are regularised as on every backend
(engines/prompt/processor.py's read_media). A video is read as frames, each an image to the
runtime, so its marker stands for as many markers as it has frames.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import MediaError
from ..model_files.model_args import ModelArgs
from ..request import MediaKind, PLACEHOLDERS
from .processor import read_media

_PLACEHOLDER = re.compile("|".join(re.escape(tag) for tag in PLACEHOLDERS.values()))
_KIND_OF_TAG = {tag: kind for kind, tag in PLACEHOLDERS.items()}


class MarkerMedia:
    """What a PromptBuilder needs of a model's media when its runtime reads them by ``marker``:
    the kinds it takes, the messages as the template should see them, the check that every file
    has its marker, and the files regularised."""

    def __init__(self, marker: str, kinds: Iterable[MediaKind], model_args: ModelArgs, sampling_rate: int | None, tokenizer: Any) -> None:
        self.marker = marker
        self.kinds = frozenset(kinds)
        self.model_args = model_args
        self.sampling_rate = sampling_rate
        self.tokenizer = tokenizer
        self._typed_content: dict[str, bool] = {}

    def check_available(self, media: dict[str, list]) -> None:
        """Every kind this model takes can be read here."""

    def template_messages(self, messages: list[dict[str, Any]], template: str) -> list[dict[str, Any]]:
        """Each placeholder as the marker, in a text part where the template renders content
        parts only (as multimodal templates written for processors often do)."""
        if template not in self._typed_content:
            self._typed_content[template] = _takes_typed_content_only(self.tokenizer, template)
        shown = []
        for message in messages:
            content = message["content"]
            if isinstance(content, str):
                content = _PLACEHOLDER.sub(self.marker, content)
                if self._typed_content[template]:
                    content = [{"type": "text", "text": content}]
            shown.append({**message, "content": content})
        return shown

    def check_tokens(self, prompt: str, media: dict[str, list]) -> None:
        placed, given = prompt.count(self.marker), sum(map(len, media.values()))
        if placed != given:
            raise MediaError(
                f"The prompt holds {placed} media marker(s) for {given} file(s): "
                + ("the chat template dropped some (it may not take them in every role); put each placeholder in a user message."
                   if placed < given else f"remove {self.marker} from the message text, or give one file for each.")
            )

    def load_media(self, media: dict[str, list]) -> dict[str, list]:
        audio = (self.sampling_rate, self.model_args.audio_max_seconds, "the audio_max_seconds setting") if self.sampling_rate else None
        return read_media(media, self.model_args, audio)

    @staticmethod
    def order(messages: list[dict[str, Any]]) -> list[MediaKind]:
        """The kind of each placeholder, in the order the prompt holds them."""
        return [_KIND_OF_TAG[tag] for message in messages if isinstance(message["content"], str)
                for tag in _PLACEHOLDER.findall(message["content"])]


def _takes_typed_content_only(tokenizer: Any, template: str) -> bool:
    """Whether the template drops a message's content given as a string, but renders it as a text part."""
    probe = "anychat-probe"

    def renders(content: Any) -> bool:
        try:
            return probe in tokenizer.apply_chat_template([{"role": "user", "content": content}], chat_template=template,
                                                          tokenize=False, add_generation_prompt=True)
        except Exception:  # a template may fail on a shape it does not expect in any way
            return False

    return not renders(probe) and renders([{"type": "text", "text": probe}])
