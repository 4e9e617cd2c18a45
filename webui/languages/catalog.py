"""The one catalog of the page's text: every string the page shows, by key, in each language.

English is written once: the page's own strings in ``en.py``, and the settings' labels, info lines
and placeholders where the settings are declared (``page_control`` in engines/), under keys built
from the field names (``setting.temperature.label``). Each other language (``zh_cn.py``,
``fr.py``) holds exactly English's keys (tests/test_page_languages.py fails on a key missing or
left over). Model text and chats are never put through it.

Two readers: components built with ``text(key)`` are translated by the browser (Gradio's own
``gr.I18n``, from the page's config), and what handlers write as the page runs (status lines,
notes, toasts) is put into the words of the event's language with ``said(key, **values)``,
server-side, where ``{name}`` fields are filled in. A string the browser translates has no ``{``:
the browser reads its catalog as ICU messages, where a brace starts a field.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
from gradio.context import LocalContext
from gradio.i18n import I18nData
from pydantic import BaseModel

from engines import GenerationArgs, ModelArgs
from engines.context_settings import ContextSettings
from engines.reply_format import ReplyFormatChoice
from library.whole_document import LongDocumentSettings
from tools import ToolSettings

from .chosen_language import ENGLISH, LANGUAGES, language_of

# The settings that have controls on the page.
SETTINGS: tuple[type[BaseModel], ...] = (ModelArgs, GenerationArgs, ContextSettings, LongDocumentSettings, ReplyFormatChoice, ToolSettings)
# What a control shows in words; its other options (a step, an elem_id) are no text.
TEXT_OPTIONS = ("label", "info", "placeholder")


def setting_key(name: str, option: str) -> str:
    return f"setting.{name}.{option}"


def is_text(value: Any) -> bool:
    """Words to translate, not an example of code: a placeholder that is JSON (a schema, engine
    arguments) reads the same in every language."""
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return True
    return False


def setting_texts() -> dict[str, str]:
    """The English of every setting's control, as its field declares it."""
    texts = {}
    for settings in SETTINGS:
        for name, field in settings.model_fields.items():
            page = (field.json_schema_extra or {}).get("page", {})
            texts |= {setting_key(name, option): page[option] for option in TEXT_OPTIONS if is_text(page.get(option))}
    return texts


CATALOG: dict[str, dict[str, str]] = {language.CODE: language.TEXT for language in LANGUAGES}
CATALOG[ENGLISH] = CATALOG[ENGLISH] | setting_texts()
# Passed to gr.mount_gradio_app (and launch): the page's config carries the catalog to the browser.
PAGE_I18N = gr.I18n(**CATALOG)


def text(key: str) -> I18nData:
    """A component's text, which the browser shows in the page's language. A key English lacks is
    a KeyError as the page is built."""
    if key not in CATALOG[ENGLISH]:
        raise KeyError(f"{key} is not in the page's catalog (webui/languages/)")
    return PAGE_I18N(key)


def script_words(*keys: str) -> str:
    """The words of ``keys`` for a script the page runs, as a JavaScript expression: an object of
    them by key, in the language the page speaks (``navigator.language``, which the page's first
    script sets to one of the catalog's), else English."""
    words = {language: {key: CATALOG[language][key] for key in keys} for language in CATALOG}
    return f"(({json.dumps(words, ensure_ascii=False)})[navigator.language] || {json.dumps(words[ENGLISH], ensure_ascii=False)})"


def said(key: str, **values: Any) -> str:
    """The text of ``key`` in the language of the page whose event is running (English outside
    one), with ``values`` filled in."""
    words = CATALOG[language_of(LocalContext.request.get(None))][key]
    return words.format(**values) if values else words
