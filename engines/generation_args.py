"""Generation settings: how to sample a reply, with defaults from the model's generation_config.json."""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from .logprobs import MAX_TOP_LOGPROBS
from .settings import Settings, page_control

# Bounds that keep every runtime's integer types safe (torch and llama.cpp take 64/32-bit values).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Below this temperature sampling is greedy, as in vLLM: dividing the logits by a smaller one
# overflows them to infinity, and the sampler then draws from NaN probabilities.
GREEDY_BELOW = 1e-5
# OpenAI's reasoning efforts; the first two turn a template's thinking switch off.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
THINKING_OFF = ("none", "minimal")
# Stop strings: as many as OpenAI's API takes, each as long as any real one. Every token of a
# reply is checked against them, and some runtimes precompute tables per string.
MAX_STOP_STRINGS = 4
MAX_STOP_LENGTH = 256


class GenerationArgs(Settings):
    """Every engine maps these to its own runtime's names. The settings in ``OPTIONAL`` are
    honoured by some engines only (``BaseEngine.generation_settings``); the others refuse them
    unless they keep their neutral default."""

    kind = "generation"

    temperature: float = Field(0.7, ge=0, le=2, description=f"0 (or below {GREEDY_BELOW}) means greedy",
                               json_schema_extra=page_control("Temperature (0 = greedy)", step=0.05))
    top_p: float = Field(0.9, gt=0, le=1, description="1 turns it off", json_schema_extra=page_control("top_p", step=0.01))
    # The page's sliders stop where useful values end; the API and Python take the whole range.
    top_k: int = Field(50, ge=0, le=INT32_MAX, description="0 turns it off", json_schema_extra=page_control("top_k (0 = off)", step=1, maximum=200))
    min_p: float = Field(0.0, ge=0, le=1, description="0 turns it off")
    max_new_tokens: int = Field(1024, ge=1, le=INT32_MAX, description="the reply's length limit in tokens",
                                json_schema_extra=page_control("max_new_tokens", step=1, maximum=8192))
    # Not near 0: the penalty divides the logits, and a tiny one overflows them.
    repetition_penalty: float = Field(1.0, ge=0.01, le=2, description="1 means none",
                                      json_schema_extra=page_control("Repetition penalty", step=0.01, minimum=0.5))
    presence_penalty: float = Field(0.0, ge=-2, le=2, description="0 means none")
    frequency_penalty: float = Field(0.0, ge=-2, le=2, description="0 means none")
    num_return_sequences: int = Field(1, ge=1, le=16, description="replies to write; streams show the first")
    stop: tuple[str, ...] = Field(
        (), description=f"strings that end the reply and are not part of it (at most {MAX_STOP_STRINGS}, of at most {MAX_STOP_LENGTH} characters)"
    )
    seed: int | None = Field(None, ge=0, le=INT64_MAX, description="none for a random one",
                             json_schema_extra=page_control("Seed (empty = random)", minimum=0))
    do_sample: bool = Field(True, description="False means greedy")
    skip_special_tokens: bool = Field(True, json_schema_extra=page_control("Skip special tokens"))
    enable_thinking: bool | None = Field(None, description="for reasoning models' templates; None keeps the template's default",
                                         json_schema_extra=page_control("Enable thinking", info="For reasoning models whose template supports it."))
    reasoning_effort: Literal[REASONING_EFFORTS] | None = Field(
        None, description="how much a reasoning model thinks first, on chat templates with a thinking switch: "
                          f"{' and '.join(THINKING_OFF)} turn it off, the others on (a template that reads reasoning_effort gets it as it is)")
    lora_adapter: str | None = Field(None, description='the loaded LoRA adapter that answers (its directory name; "" for the base model)')
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS,
                                 description=f"report each reply token's log-probability and those of this many likeliest tokens at its place (0 to {MAX_TOP_LOGPROBS}); none for none")

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"min_p", "presence_penalty", "frequency_penalty", "lora_adapter", "logprobs"})
    # Keys of generation_config.json that are generation settings we honour.
    FROM_MODEL_CONFIG: ClassVar[tuple[str, ...]] = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "do_sample", "max_new_tokens")

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_strings(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            value = (value,) if value else ()
        if not isinstance(value, (list, tuple)):
            return value
        if len(value) > MAX_STOP_STRINGS:
            raise ValueError(f"can hold at most {MAX_STOP_STRINGS} stop strings (as in OpenAI's API), got {len(value)}: keep the ones that matter")
        longest = max((len(s) for s in value if isinstance(s, str)), default=0)
        if longest > MAX_STOP_LENGTH:
            raise ValueError(f"strings can be at most {MAX_STOP_LENGTH} characters long, got one of {longest:,}: shorten it to the part that ends the reply")
        if not all(isinstance(s, str) and s for s in value):
            raise ValueError(f"must be non-empty strings, got {list(value)!r}")
        return value

    @model_validator(mode="after")
    def _one_thinking_switch(self) -> GenerationArgs:
        if self.reasoning_effort is not None and self.enable_thinking is not None and self.thinks != self.enable_thinking:
            raise ValueError(
                f"reasoning_effort {self.reasoning_effort!r} turns thinking {'on' if self.thinks else 'off'}, but enable_thinking "
                f"is {self.enable_thinking}: give one of them"
            )
        return self

    @property
    def thinks(self) -> bool | None:
        """Whether the template's thinking switch is on (None: the template's own default)."""
        if self.reasoning_effort is not None:
            return self.reasoning_effort not in THINKING_OFF
        return self.enable_thinking

    @field_validator("seed", mode="before")
    @classmethod
    def _empty_seed(cls, value: Any) -> Any:
        return None if value == "" else value

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature < GREEDY_BELOW

    @classmethod
    def from_model_dir(cls, model_dir: str | os.PathLike | None) -> GenerationArgs:
        """Our defaults, overridden by what the model's own generation_config.json sets."""
        path = os.path.join(model_dir, "generation_config.json") if model_dir else None
        if path is None or not os.path.isfile(path):
            return cls()
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        return cls.build(**{name: saved[name] for name in cls.FROM_MODEL_CONFIG if saved.get(name) is not None})

    def replace(self, **overrides: Any) -> GenerationArgs:
        """A copy with ``overrides`` applied (see ``given`` for what None means)."""
        return super().replace(**self.given(overrides))

    @classmethod
    def chosen(cls, **values: Any) -> dict[str, Any]:
        """The settings among ``values`` that a caller chose, each checked (name and range) and
        in the form the settings hold it; a ConfigError says what is wrong."""
        given = cls.given(values)
        checked = cls.build(**given)
        return {name: getattr(checked, name) for name in given}

    @classmethod
    def given(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` without those left out: None means "not given", except for the settings whose
        default is None (seed, enable_thinking, reasoning_effort, lora_adapter, logprobs), where it resets them."""
        nullable = {name for name, field in cls.model_fields.items() if field.default is None}
        return {name: value for name, value in values.items() if value is not None or name in nullable}
