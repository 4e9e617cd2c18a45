"""The page's controls for settings, built from the settings' own declarations (engines/settings.py):
the label and what else the page shows from ``page_control`` (its words in the page's language,
from the catalog's keys for the setting), the range, choices and type from the field, so that a
control cannot allow what its setting refuses."""

from __future__ import annotations

from typing import Any, get_origin

import gradio as gr
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from engines.settings import choices, field_range, value_type

from .languages import text
from .languages.catalog import TEXT_OPTIONS, is_text, setting_key


def control(settings: type[BaseModel], name: str, value: Any = None, **overrides: Any) -> gr.components.Component:
    """The control for setting ``name`` of ``settings``, showing ``value`` (a choice shows the
    setting's default when none is given). ``overrides`` go to the Gradio component over what the
    declaration says; given ``choices``, the control is a dropdown of them, or checkboxes for a
    setting that is a list of them. A setting with a
    ``step`` is a slider over its range (from the step above an open lower bound), narrowed by a
    declared ``minimum`` or ``maximum``; other numbers are number boxes, booleans checkboxes, the
    rest text boxes."""
    field = settings.model_fields[name]
    page = (field.json_schema_extra or {})["page"]
    words = {option: text(setting_key(name, option)) for option in TEXT_OPTIONS if is_text(page.get(option))}
    options = {"elem_id": name.replace("_", "-"), **page, **words, **overrides}
    kind = value_type(field)
    if get_origin(kind) is list:
        return gr.CheckboxGroup(value=field.default if value is None else value, **options)
    if "choices" in options or choices(field):
        options.setdefault("choices", list(choices(field)))
        return gr.Dropdown(value=field.default if value is None else value, **options)
    if kind is bool:
        return gr.Checkbox(value, **options)
    if kind in (int, float) and "step" in options:
        return gr.Slider(value=value, **_slider_range(field, options["step"]) | options)
    if kind in (int, float):
        return gr.Number(value, precision=0 if kind is int else None, **options)
    return gr.Textbox(value, **options)


def _slider_range(field: FieldInfo, step: float) -> dict[str, Any]:
    bounds = field_range(field)
    return {"minimum": bounds["ge"] if "ge" in bounds else bounds["gt"] + step, "maximum": bounds["le"]}
