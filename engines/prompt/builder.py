"""The prompt path every engine holds: the model's tokenizer, chat template and media processor.

From a checked request it renders the prompt with the model's own template, tokenizes it the way
the template meant (no second BOS), regularises the media, and checks the result against the
model's context. Engines take the ``Prompt`` it builds and do only what is their backend's own.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, MediaError, ModelLoadError, UnsupportedError
from ..generation_args import GenerationArgs
from ..model_files.model_args import ModelArgs
from ..request import ChatRequest
from .processor import MediaProcessor, is_multimodal
from .reply_parser import THINK_OPEN
from .template import reasoning_variables, render_chat, template_source

# The rendered prompts whose token ids are kept (PromptBuilder.token_ids).
PROMPTS_TOKENIZED_KEPT = 8
LOAD_HINT = "Give a local model directory (with config.json), a .gguf file, or a Hub name (which needs the network)."


@dataclass
class Prompt:
    """One request, ready for a backend: its generation settings (the model's defaults with the
    request's own, ``max_new_tokens`` fitted to the context), the rendered text, its token ids,
    and the media regularised (images, engines.prompt.media.Video, mono audio), in the order of
    their placeholders."""

    request: ChatRequest
    generation: GenerationArgs
    text: str
    ids: list[int]
    media: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def opens_reasoning(self) -> bool:
        """The template opened ``<think>`` itself, so the reply starts inside it."""
        return self.text.rstrip().endswith(THINK_OPEN)

    @property
    def parse_tools(self) -> bool:
        return bool(self.request.tools)


class PromptBuilder:
    """A model's tokenizer, template and (for multimodal models) processor, and its generation
    defaults. ``context_length`` (prompt plus reply, in tokens) is set by the engine once its
    runtime has said what it serves; None means the model sets no limit we know of."""

    def __init__(self, model_args: ModelArgs, tokenizer: Any, defaults: GenerationArgs, media: MediaProcessor | None,
                 trained_context: int | None, can_generate: bool = True, config: Any = None) -> None:
        self.model_args = model_args
        # transformers' config of a model directory (None for a GGUF file's metadata).
        self.config = config
        self.tokenizer = tokenizer
        self.defaults = defaults
        self.media = media
        self.can_generate = can_generate
        self.media_kinds = media.kinds if media else frozenset()
        # Older multimodal checkpoints keep their chat template with the processor only.
        self.template = template_source(media.processor if media else tokenizer, model_args.chat_template) if self.can_generate else None
        limits = [limit for limit in (trained_context, model_args.max_model_len) if limit]
        self.context_length = min(limits) if limits else None
        # In characters, as its vocabulary spells it (byte-level vocabularies: one per byte).
        self.longest_token = max(map(len, tokenizer.get_vocab()), default=1)
        # A long prompt takes tens of milliseconds to tokenize, and a compaction's check
        # (engines/compaction.py) counts each prompt just before it is prepared.
        self._tokenized = functools.lru_cache(maxsize=PROMPTS_TOKENIZED_KEPT)(self._tokenize)

    @classmethod
    def from_pretrained(cls, path: str, model_args: ModelArgs, generation: dict[str, Any] | None = None) -> PromptBuilder:
        """Read a model directory's config, tokenizer, processor and generation config: everything
        but the weights."""
        from transformers import AutoConfig, AutoTokenizer

        remote = model_args.trust_remote_code
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=remote)
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=remote)
        except (OSError, ValueError, KeyError) as error:
            raise ModelLoadError(f"Could not load {model_args.display_name}: {error}. {LOAD_HINT}") from error
        generative = is_generative(config)
        media = MediaProcessor.load(path, model_args) if generative and is_multimodal(config) else None
        return cls(model_args, _with_pad_token(tokenizer), _defaults(path, generation), media, _trained_context(config), generative, config)

    @classmethod
    def from_gguf_metadata(cls, path: str, model_args: ModelArgs, generation: dict[str, Any] | None,
                           trained_context: int | None) -> PromptBuilder:
        """A GGUF text model's prompt path, from the tokenizer and generation config read once from
        its file (engines/model_files/gguf.py) and its context from its header. Its tokenizer's
        own class is loaded, as AutoTokenizer would pick it, without AutoTokenizer, which imports
        torch (seconds, and hundreds of MiB) for a model that llama.cpp runs."""
        import transformers

        try:
            with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
                named = json.load(f).get("tokenizer_class")
            tokenizer = getattr(transformers, named or "", transformers.PreTrainedTokenizerFast).from_pretrained(path)
        except (OSError, ValueError, KeyError) as error:
            raise ModelLoadError(f"Could not load {model_args.display_name}'s tokenizer: {error}.") from error
        return cls(model_args, _with_pad_token(tokenizer), _defaults(path, generation), None, trained_context)

    def use_media(self, media: Any) -> None:
        """Read media through ``media`` (a runtime's own, such as engines/prompt/media_markers.py's
        MarkerMedia) instead of a processor loaded with the model."""
        self.media = media
        self.media_kinds = media.kinds

    # ---- requests

    def generation(self, request: ChatRequest) -> GenerationArgs:
        """What this model makes of ``request`` before any work: its generation settings (the
        model's defaults with the request's own), or a clear error where the model cannot answer
        it (a reward model, media it does not read)."""
        if not self.can_generate:
            raise UnsupportedError("This model is a reward model: it scores texts (get_scores) but does not write replies.")
        if self.media:
            self.media.check_available(request.media)
        for kind in request.media:
            if kind not in self.media_kinds:
                raise MediaError(f"This model does not accept {kind}s. Remove the {kind} or load a model that takes {kind}s.")
        generation = self.defaults.replace(**request.generation)
        if request.prompt is None:
            reasoning_variables(self.template, generation)  # a template without a thinking switch refuses an effort now
        return generation

    def render(self, request: ChatRequest, generation: GenerationArgs) -> str:
        """The prompt's text: a completion's prompt as it is, a chat through the model's template."""
        if request.prompt is not None:
            return request.prompt if isinstance(request.prompt, str) else self.tokenizer.decode(request.prompt)
        messages = self.media.template_messages(request.messages, self.template) if self.media else request.messages
        variables = {**request.template_kwargs, **reasoning_variables(self.template, generation)}
        return render_chat(self.tokenizer, self.template, messages, request.tools, variables, request.continue_final_message)

    def token_ids(self, text: str) -> list[int]:
        """A rendered prompt's token ids (its special tokens are the template's own text)."""
        return list(self._tokenized(text))

    def _tokenize(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False).input_ids)

    def prepare(self, request: ChatRequest, generation: GenerationArgs) -> Prompt:
        """Render and tokenize; check the length against the context (what cannot fit before it
        is tokenized, what does not after) and the media against the prompt's media tokens;
        regularise the media. Slow: call it off the event loop."""
        if request.prompt is not None:
            return self._prepare_completion(request, generation)
        self._refuse_what_cannot_fit(sum(len(message["content"]) for message in request.messages))
        text = self.render(request, generation)
        self._refuse_what_cannot_fit(len(text))
        ids = self.token_ids(text)
        generation = self.fit(len(ids), generation)
        if self.media:
            self.media.check_tokens(text, request.media)
        if not request.media:
            return Prompt(request, generation, text, ids)
        return Prompt(request, generation, text, ids, self.media.load_media(request.media))

    def _prepare_completion(self, request: ChatRequest, generation: GenerationArgs) -> Prompt:
        """A text completion's prompt as it is: text tokenized with the tokenizer's own special
        tokens (as vLLM does), or token ids, each checked against the vocabulary."""
        if isinstance(request.prompt, str):
            self._refuse_what_cannot_fit(len(request.prompt))
            ids = self.tokenizer(request.prompt).input_ids
        else:
            ids = list(request.prompt)
            vocabulary = len(self.tokenizer)
            unknown = sorted({token for token in ids if token >= vocabulary})
            if unknown:
                raise ConfigError(f"The prompt holds token ids this model does not have: {unknown[:5]}; its ids go from 0 to {vocabulary - 1}.")
        return Prompt(request, self.fit(len(ids), generation), self.render(request, generation), ids)

    def fit(self, prompt_length: int, args: GenerationArgs) -> GenerationArgs:
        """Refuse a prompt that fills the context; cut max_new_tokens to what is left (as vLLM does)."""
        if self.context_length is None:
            return args
        if prompt_length >= self.context_length:
            raise ConfigError(self._too_long(f"{prompt_length} tokens long"))
        room = self.context_length - prompt_length
        return args if args.max_new_tokens <= room else args.replace(max_new_tokens=room)

    def _refuse_what_cannot_fit(self, characters: int) -> None:
        """Refuse text too long for the context before tokenizing it (a 45 MB prompt took the
        tokenizer a minute): no token of this model spells more than ``longest_token``
        characters, so the text has at least characters / longest_token tokens. (A tokenizer
        that drops characters, or reads a long unknown word as one token, could take a little
        more: only text made of such words would notice.)"""
        at_least = -(-characters // self.longest_token)
        if self.context_length is not None and at_least >= self.context_length:
            raise ConfigError(self._too_long(
                f"at least {at_least} tokens long ({characters:,} characters, and no token of this model is longer than {self.longest_token})"
            ))

    def _too_long(self, length: str) -> str:
        return (
            f"The conversation is {length}, more than this model's limit of {self.context_length} tokens for prompt and reply "
            "together. Start a new chat, shorten or remove earlier messages, or load the model with a larger max_model_len "
            "(where the model supports it)."
        )


def is_generative(config: Any) -> bool:
    """Whether the model writes text; reward models (sequence classifiers) only score it."""
    return not any(a.endswith("ForSequenceClassification") for a in config.architectures or ())


def _trained_context(config: Any) -> int | None:
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text_config, "max_position_embeddings", None)


def _with_pad_token(tokenizer: Any) -> Any:
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _defaults(path: str, generation: dict[str, Any] | None) -> GenerationArgs:
    """The model's generation defaults: ours, its generation_config.json's, then ``generation``."""
    return GenerationArgs.from_model_dir(path).replace(**(generation or {}))
