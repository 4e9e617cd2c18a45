"""What model and generation settings share: pydantic models whose errors read as advice.

A ``Settings`` subclass declares each setting with ``Field`` (default, range, description).
Building one with bad values raises ``ConfigError`` naming every problem: unknown names
together with the valid ones, and each bad value with its allowed range and what it means.
"""

from __future__ import annotations

from typing import Any, ClassVar

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    # How error messages name these settings ("generation" -> "Unknown generation setting(s)").
    kind: ClassVar[str] = "setting"

    @classmethod
    def names(cls) -> list[str]:
        return list(cls.model_fields)

    @classmethod
    def build(cls, **values: Any) -> Any:
        """The settings from ``values``, or a ConfigError that says what is wrong with them."""
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            raise ConfigError(
                f"Unknown {cls.kind} setting(s): {', '.join(unknown)}. Valid ones: {', '.join(cls.names())}."
            )
        try:
            return cls(**values)
        except ValidationError as error:
            raise ConfigError(f"Invalid {cls.kind} settings: {cls._explain(error)}.") from None

    def replace(self, **overrides: Any) -> Any:
        """A copy with ``overrides`` applied and checked."""
        return self.build(**{**self.model_dump(), **overrides})

    def non_defaults(self) -> list[str]:
        """The settings given a value other than their default."""
        return [name for name, field in type(self).model_fields.items() if getattr(self, name) != field.get_default(call_default_factory=True)]

    @classmethod
    def _explain(cls, error: ValidationError) -> str:
        problems = []
        for item in error.errors():
            if not item["loc"]:  # a rule about several settings together: its message says it all
                problems.append(item["msg"].removeprefix("Value error, "))
                continue
            name = str(item["loc"][0])
            field = cls.model_fields.get(name)
            meaning = f" ({field.description})" if field and field.description else ""
            if item["type"] in _OUT_OF_RANGE and field:
                problems.append(f"{name} must be {_allowed_range(field.metadata)}{meaning}, got {item['input']!r}")
            elif item["type"] in ("int_parsing", "int_from_float", "int_type"):
                problems.append(f"{name} must be a whole number{meaning}, got {item['input']!r}")
            elif item["type"] in ("float_parsing", "float_type"):
                problems.append(f"{name} must be a number{meaning}, got {item['input']!r}")
            else:
                message = item["msg"].removeprefix("Value error, ")
                # Validators word their messages to follow the name: "stop must be non-empty strings".
                problems.append(f"{name} {message}" if item["type"] == "value_error" else f"{name}: {message}, got {item['input']!r}")
        return "; ".join(problems)


_OUT_OF_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _allowed_range(metadata: list[Any]) -> str:
    """A field's bounds in words: "in (0, 1]", "at least 1", "above 0"."""
    low = high = None
    for constraint in metadata:
        if isinstance(constraint, annotated_types.Ge):
            low = ("[", constraint.ge)
        elif isinstance(constraint, annotated_types.Gt):
            low = ("(", constraint.gt)
        elif isinstance(constraint, annotated_types.Le):
            high = ("]", constraint.le)
        elif isinstance(constraint, annotated_types.Lt):
            high = (")", constraint.lt)
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"at least {low[1]}" if low[0] == "[" else f"above {low[1]}"
    if high:
        return f"at most {high[1]}" if high[0] == "]" else f"below {high[1]}"
    return ""
