"""Generation settings: one dataclass, defaults from the model's generation_config.json."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class GenerationArgs:
    """How to sample a reply. Every engine maps these to its own runtime's names.

    ``temperature=0`` or ``do_sample=False`` means greedy decoding. ``stop`` strings end the
    reply and are not part of it. ``enable_thinking`` is handed to the chat template of
    reasoning models (None leaves the template's own default).
    """

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 50
    max_new_tokens: int = 1024
    repetition_penalty: float = 1.0
    num_return_sequences: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    do_sample: bool = True
    skip_special_tokens: bool = True
    enable_thinking: bool | None = None

    # Keys of generation_config.json that are generation settings we honour.
    _FROM_MODEL_CONFIG = ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample", "max_new_tokens")

    def __post_init__(self) -> None:
        problems = []
        if self.temperature < 0:
            problems.append(f"temperature must be 0 or more (0 means greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be 0 (off) or more, got {self.top_k}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be above 0, got {self.repetition_penalty}")
        if self.num_return_sequences < 1:
            problems.append(f"num_return_sequences must be at least 1, got {self.num_return_sequences}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append(f"stop must be non-empty strings, got {list(self.stop)!r}")
        if problems:
            raise ConfigError("Invalid generation settings: " + "; ".join(problems) + ".")

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_model_dir(cls, model_dir: str | os.PathLike | None) -> GenerationArgs:
        """Our defaults, overridden by what the model's own generation_config.json sets."""
        if model_dir is None:
            return cls()
        path = os.path.join(model_dir, "generation_config.json")
        if not os.path.isfile(path):
            return cls()
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        return cls().replace(**{k: saved[k] for k in cls._FROM_MODEL_CONFIG if saved.get(k) is not None})

    def replace(self, **overrides: Any) -> GenerationArgs:
        """A copy with ``overrides`` applied; unknown names are an error that lists them."""
        unknown = sorted(set(overrides) - set(self.names()))
        if unknown:
            raise ConfigError(
                f"Unknown generation argument(s): {', '.join(unknown)}. Valid ones: {', '.join(self.names())}."
            )
        values = {name: _coerce(name, value) for name, value in overrides.items() if value is not None or name in _NULLABLE}
        return dataclasses.replace(self, **values)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}


_NULLABLE = {"seed", "enable_thinking"}
_INT_FIELDS = {"top_k", "max_new_tokens", "num_return_sequences"}
_FLOAT_FIELDS = {"temperature", "top_p", "repetition_penalty"}
_BOOL_FIELDS = {"do_sample", "skip_special_tokens"}


def _coerce(name: str, value: Any) -> Any:
    """Accept what forms and JSON give (a slider's 50.0 for top_k, a single stop string)."""
    try:
        if name in _INT_FIELDS:
            if float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if name in _FLOAT_FIELDS:
            return float(value)
        if name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise ValueError
            return value
        if name == "seed":
            return None if value is None or value == "" else int(value)
        if name == "stop":
            if isinstance(value, str):
                return (value,) if value else ()
            return tuple(value)
    except (TypeError, ValueError):
        raise ConfigError(f"Generation argument {name} has an invalid value {value!r}.") from None
    return value
