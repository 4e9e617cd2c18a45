"""What model and generation settings share: pydantic models whose errors read as advice.

A ``Settings`` subclass declares each setting with ``Field`` (default, range, description), and
what its control on the page needs besides (``page_control``). That declaration is the only one:
the API's fields, the page's controls and the command-line flags are built from it. Building
settings with bad values raises ``ConfigError`` naming every problem: unknown names together
with the valid ones, and each bad value with its allowed range or choices and what it means.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

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
        return cls.build_in(None, **values)

    @classmethod
    def build_in(cls, context: dict[str, Any] | None, /, **values: Any) -> Any:
        """``build``, the validators given ``context`` (pydantic's validation context): what they
        check values against that is not itself a setting, such as the tools that run here
        (tools/settings.py)."""
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            raise ConfigError(
                f"Unknown {cls.kind} setting(s): {', '.join(unknown)}. Valid ones: {', '.join(cls.names())}."
            )
        try:
            return cls.model_validate(values, context=context)
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
                problems.append(f"{name} must be {_allowed_range(field)}{meaning}, got {item['input']!r}")
            elif item["type"] == "literal_error" and field:
                problems.append(f"{name} must be one of: {', '.join(choices(field))}; got {item['input']!r}")
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
_BOUNDS = {annotated_types.Gt: "gt", annotated_types.Ge: "ge", annotated_types.Lt: "lt", annotated_types.Le: "le"}


def page_control(label: str, **options: Any) -> dict[str, Any]:
    """A setting's ``json_schema_extra`` for its control on the page (webui/controls.py builds it):
    the label, and what Gradio's component takes besides the field's own default, range and choices,
    such as a slider's ``step``, a ``minimum`` or ``maximum`` within the field's range that a slider
    can practically show, or an ``elem_id`` other than the setting's name."""
    return {"page": {"label": label, **options}}


def field_range(field: FieldInfo) -> dict[str, Any]:
    """A field's bounds as ``Field`` takes them, like {"ge": 0, "le": 2}."""
    return {_BOUNDS[type(constraint)]: getattr(constraint, _BOUNDS[type(constraint)]) for constraint in field.metadata if type(constraint) in _BOUNDS}


def choices(field: FieldInfo) -> tuple[Any, ...]:
    """The values a ``Literal`` field (or an optional one) may take (none for any other field)."""
    annotation = value_type(field)
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def value_type(field: FieldInfo) -> Any:
    """A field's type with None taken out of it: int for ``int | None``."""
    if get_origin(field.annotation) in (Union, types.UnionType):
        return next(arg for arg in get_args(field.annotation) if arg is not type(None))
    return field.annotation


def _allowed_range(field: FieldInfo) -> str:
    """A field's bounds in words: "in (0, 1]", "at least 1", "above 0"."""
    bounds = field_range(field)
    low = ("[", bounds["ge"]) if "ge" in bounds else ("(", bounds["gt"]) if "gt" in bounds else None
    high = ("]", bounds["le"]) if "le" in bounds else (")", bounds["lt"]) if "lt" in bounds else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"at least {low[1]}" if low[0] == "[" else f"above {low[1]}"
    if high:
        return f"at most {high[1]}" if high[0] == "]" else f"below {high[1]}"
    return ""
