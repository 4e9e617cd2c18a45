"""The Settings tab's Language: the browser's, or one of the catalog's, kept in this browser's
localStorage; a choice reloads the page, whose script (chosen_language.py) then speaks it."""

from __future__ import annotations

import gradio as gr

from .catalog import said, text
from .chosen_language import LANGUAGES, OFFERED, STORAGE_KEY

BROWSERS = ""  # the choice that follows the browser's languages

KEPT = f"() => localStorage.getItem('{STORAGE_KEY}') || '{BROWSERS}'"
KEEP_AND_RELOAD = f"""(language) => {{
    if (language) localStorage.setItem('{STORAGE_KEY}', language);
    else localStorage.removeItem('{STORAGE_KEY}');
    location.reload();
}}"""


def choices() -> list[tuple[str, str]]:
    """Each language in its own words, after the browser's (in the page's)."""
    return [(said("language.browser"), BROWSERS), *((language.NAME, language.CODE) for language in LANGUAGES)]


def shown(kept: str) -> dict:
    return gr.update(choices=choices(), value=kept if kept in OFFERED else BROWSERS)


def language_chooser(demo: gr.Blocks) -> gr.Dropdown:
    """The dropdown, built where it shows; it shows the choice this browser keeps once the page
    loads (a choice made in it is kept, and the page reloaded, by webui/page_preferences.py)."""
    chooser = gr.Dropdown(choices(), value=BROWSERS, label=text("language.label"), info=text("language.info"), elem_id="page-language")
    demo.load(shown, chooser, chooser, js=KEPT, queue=False, api_visibility="private")
    return chooser
