"""The page's languages (webui/languages/): one catalog, complete in each language; every string
the page shows goes through it; the language a page speaks is the one its browser chose.
No browser here: tests/test_browser_languages.py opens the page in Chinese and French."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradio.context import LocalContext

from engines import LoadedModels
from webui.languages.catalog import CATALOG, SETTINGS, TEXT_OPTIONS, is_text, said, setting_key
from webui.languages.chosen_language import COOKIE, ENGLISH, LANGUAGE_SCRIPT, OFFERED, language_of, with_language_script

ROOT = Path(__file__).resolve().parent.parent
MARKER = "__i18n__"


def fields(words: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(words) if name is not None}


def keys_used() -> dict[str, str]:
    """Each key the page's code asks the catalog for (``text("…")``, ``said("…")``, ``script_words("…", …)``, either of
    ``said("…" if … else "…")``), and each the chat core names for its notices (``Notice("…", …)``),
    as a pattern, by the file asking: a key built as it runs (``said(f"reads.{kind}")``) matches any
    word where it fills in."""
    used = {}
    for path in sorted([*(ROOT / "webui").rglob("*.py"), *(ROOT / "chat").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
                continue
            arguments = node.args[:1] if node.func.id == "Notice" else node.args if node.func.id in ("text", "said", "script_words") else []
            for pattern in (pattern for argument in arguments for pattern in key_patterns(argument)):
                used[pattern] = path.name
    return used


def key_patterns(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [re.escape(node.value)]
    if isinstance(node, ast.JoinedStr):
        return ["".join(re.escape(part.value) if isinstance(part, ast.Constant) else r"\w+" for part in node.values)]
    if isinstance(node, ast.IfExp):
        return key_patterns(node.body) + key_patterns(node.orelse)
    if isinstance(node, ast.Attribute) and ast.unparse(node) == "notice.key":
        return []  # a notice said in the user's language (webui/notices.py): its key is read where the core makes it
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setting_key":
        return []  # the settings' own words: test_every_setting_control_has_its_words_in_each_language
    raise AssertionError(f"a key the test cannot read: {ast.unparse(node)}")


def test_every_language_has_exactly_englishs_keys():
    english = set(CATALOG[ENGLISH])
    assert set(CATALOG) == set(OFFERED) == {"en", "zh-CN", "fr"}
    for language, words in CATALOG.items():
        assert sorted(english - set(words)) == [], f"{language} has no words for these"
        assert sorted(set(words) - english) == [], f"{language} has words English has not"
        assert [key for key, value in words.items() if not value.strip()] == [], f"{language} has empty entries"


def test_every_key_the_page_asks_for_is_in_the_catalog():
    used = keys_used()
    assert len(used) > 100  # the scan found the page's keys
    for pattern, where in used.items():
        assert any(re.fullmatch(pattern, key) for key in CATALOG[ENGLISH]), f"{where} asks for {pattern}, which is not in the catalog"


def test_every_setting_control_has_its_words_in_each_language():
    for settings in SETTINGS:
        for name, field in settings.model_fields.items():
            page = (field.json_schema_extra or {}).get("page", {})
            for option in TEXT_OPTIONS:
                if is_text(page.get(option)):
                    assert CATALOG[ENGLISH][setting_key(name, option)] == page[option]
                    assert all(setting_key(name, option) in words for words in CATALOG.values())


def test_translations_fill_in_what_english_fills_in():
    for language, words in CATALOG.items():
        for key, english in CATALOG[ENGLISH].items():
            assert fields(words[key]) == fields(english), f"{language} {key}"


def test_words_the_browser_translates_read_as_icu_messages():
    """Components' words go to the browser, which formats them as ICU messages: a brace there
    starts a field, a straight apostrophe before one quotes it, and < starts a tag."""
    shown_by_browser = [key for key, english in CATALOG[ENGLISH].items() if not fields(english)]
    for language, words in CATALOG.items():
        for key in shown_by_browser:
            assert not set("{}<") & set(words[key]), f"{language} {key}"
            assert not re.search(r"'[{}#|]", words[key]), f"{language} {key}"


@pytest.fixture(scope="module")
def demo():
    from webui.layout import build_demo
    return build_demo(LoadedModels())


def test_no_component_shows_words_outside_the_catalog(demo):
    """Labels, info lines and placeholders, buttons' and Markdown's text: each is a catalog key
    (Gradio keeps it as an I18nData, or a string marked for the browser), empty, a symbol (↻), or
    an example of code (JSON): those read the same in every language."""
    from gradio.i18n import I18nData

    plain = []
    for block in demo.blocks.values():
        shown = {option: getattr(block, option, None) for option in TEXT_OPTIONS}
        if type(block).__name__ in ("Button", "UploadButton", "Markdown"):
            shown["value"] = block.value
        for option, value in shown.items():
            if isinstance(value, I18nData) or not isinstance(value, str) or MARKER in value or not is_text(value):
                continue
            if not re.search(r"[^\W\d_]", value):  # no letter in it
                continue
            plain.append(f"{type(block).__name__} #{getattr(block, 'elem_id', None)} {option}: {value!r}")
    assert plain == []


def test_the_page_carries_the_catalog():
    from webui.layout import PAGE_KWARGS

    assert PAGE_KWARGS["i18n"].translations_dict == CATALOG


def request(cookies: dict | None = None, accept: str = "") -> SimpleNamespace:
    return SimpleNamespace(cookies=cookies or {}, headers={"accept-language": accept} if accept else {})


@pytest.mark.parametrize(("page", "language"), [
    (None, "en"),
    (request(), "en"),
    (request(accept="zh-CN,zh;q=0.9,en;q=0.8"), "zh-CN"),
    (request(accept="zh-TW"), "zh-CN"),
    (request(accept="de-DE,fr;q=0.7"), "fr"),
    (request(accept="de-DE"), "en"),
    (request({COOKIE: "fr"}, accept="zh-CN"), "fr"),
    (request({COOKIE: "klingon"}, accept="zh-CN"), "zh-CN"),
])
def test_the_language_a_page_speaks(page, language):
    assert language_of(page) == language


def test_what_handlers_say_is_in_the_events_language():
    assert said("presets.saved", name="x") == "Saved preset “x”."
    token = LocalContext.request.set(request({COOKIE: "zh-CN"}))
    try:
        assert said("presets.saved", name="x") == "已保存预设“x”。"
    finally:
        LocalContext.request.reset(token)
    token = LocalContext.request.set(request(accept="fr-FR"))
    try:
        assert said("settings.server_models", count=3) == "3 servis là-bas ; vide : le premier"
    finally:
        LocalContext.request.reset(token)


def test_the_language_script_comes_before_gradios():
    page = b"<html><head><script src='gradio.js'></script></head></html>"
    edited = with_language_script(page, "text/html; charset=utf-8")
    assert edited.index(LANGUAGE_SCRIPT) < edited.index(b"gradio.js")
    assert with_language_script(b"{}", "application/json") == b"{}"
