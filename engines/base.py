"""The contract every backend implements, and the reply it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .generation_args import GenerationArgs
from .media import AudioInput, ImageInput, VideoInput
from .model_args import ModelArgs

MediaKind = Literal["image", "video", "audio"]


@dataclass
class Response:
    """One generated reply. Lengths are token counts; response_length includes the end token."""

    response_text: str
    response_length: int
    prompt_length: int
    finish_reason: Literal["stop", "length"]


class BaseEngine(ABC):
    """A loaded model on one backend.

    Engines are driven from one event loop (ChatModel's); their async methods never block it.
    ``media_kinds`` lists what the model accepts besides text, so pages can offer only those.
    """

    name: str
    model: Any
    tokenizer: Any
    can_generate: bool
    generating_args: GenerationArgs
    model_args: ModelArgs
    media_kinds: frozenset[MediaKind] = frozenset()
    # Sampling settings beyond GenerationArgs that this engine honours (say "presence_penalty");
    # callers refuse the others with a clear error rather than drop them silently.
    extra_sampling_params: frozenset[str] = frozenset()
    # True where closing this engine would harm another one started beside it (SGLang's
    # shutdown kills every child process of ours), so a model switch closes it first.
    close_before_next_load: bool = False

    @abstractmethod
    async def chat(
        self,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        images: list[ImageInput] | None = None,
        videos: list[VideoInput] | None = None,
        audios: list[AudioInput] | None = None,
        **generation: Any,
    ) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete."""

    @abstractmethod
    def stream_chat(
        self,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        images: list[ImageInput] | None = None,
        videos: list[VideoInput] | None = None,
        audios: list[AudioInput] | None = None,
        on_finish: Callable[[Response], None] | None = None,
        **generation: Any,
    ) -> AsyncIterator[str]:
        """The first reply's text, piece by piece. Closing the iterator cancels generation.

        ``on_finish`` gets the whole reply (its token counts and finish reason) once the model
        has finished on its own, before the iterator ends; a cancelled stream never calls it.
        """

    @abstractmethod
    async def get_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        """Reward scores of whole texts, for reward (sequence-classification) models."""

    @abstractmethod
    async def close(self) -> None:
        """Free the model and everything the backend holds (memory, processes, threads)."""

    def render_prompt(
        self,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        **generation: Any,
    ) -> str:
        """The exact prompt text the model would see for these messages (for inspection and tests)."""
        raise NotImplementedError(f"The {self.name} engine does not expose its rendered prompt.")
