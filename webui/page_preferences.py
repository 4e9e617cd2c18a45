"""The page's colour scheme and language, chosen in Settings → Appearance, and kept for the user
who chose them.

A browser keeps both in its localStorage (colour_scheme.py, languages/), and a page without
logins has nothing else to know its user by. A logged-in user's choices are kept in the chat
store too, with their chats, so that they follow the user to another browser or device: as the
page opens, the user's kept choices take the place of the browser's (a language other than the
one the page speaks reloads it once, as a choice in the page does)."""

from __future__ import annotations

import json

import gradio as gr
from gradio.events import Dependency

from chat.saved_chats import SavedChats

from .chat_sidebar import store_errors
from .colour_scheme import SCHEMES
from .languages.chooser import KEEP_AND_RELOAD
from .languages.chosen_language import OFFERED, STORAGE_KEY as LANGUAGE_KEY
from .user_turns import in_users_turn

# The user's kept choices, over the browser's; the scheme the Settings tab then shows.
TAKE_KEPT = """(kept) => {
    const chosen = JSON.parse(kept || "{}");
    const schemes = window.anychatColourScheme;
    if (schemes && chosen.colour_scheme && chosen.colour_scheme !== schemes.chosen()) schemes.choose(chosen.colour_scheme);
    if (chosen.language !== undefined && chosen.language !== (localStorage.getItem("%s") || "")) {
        (%s)(chosen.language);
    }
    return schemes ? schemes.chosen() : "system";
}""" % (LANGUAGE_KEY, KEEP_AND_RELOAD)


def wire(opened: Dependency, chats: gr.State, colour_scheme: gr.Radio, language: gr.Dropdown) -> None:
    """``opened``: the page's opening, which settles whose page it is (``chats``)."""
    private = {"api_visibility": "private", "concurrency_limit": None}
    kept = gr.Textbox(visible="hidden", elem_id="page-preferences")
    opened.success(in_users_turn(kept_for_user), chats, kept, **private).then(None, kept, colour_scheme, js=TAKE_KEPT, queue=False, **private)
    # .input: a choice of the user's, not the page's own setting of it. The scheme applies in the
    # browser at once; a language reloads the page, so it is kept on the server first.
    colour_scheme.input(None, colour_scheme, None, js="(scheme) => { window.anychatColourScheme && window.anychatColourScheme.choose(scheme); }",
                        queue=False, **private)
    colour_scheme.input(in_users_turn(keep_colour_scheme), [chats, colour_scheme], None, **private)
    language.input(in_users_turn(keep_language), [chats, language], None, **private).then(None, language, None, js=KEEP_AND_RELOAD, queue=False, **private)


def logged_in(chats: SavedChats | None) -> bool:
    return chats is not None and chats.owner.startswith("login:")


@store_errors
def kept_for_user(chats: SavedChats | None) -> str:
    """The logged-in user's kept choices, as JSON for TAKE_KEPT; none for a page without a login."""
    return json.dumps(chats.store.page_preferences(chats.owner) if logged_in(chats) else {})


@store_errors
def keep_colour_scheme(chats: SavedChats | None, scheme: str) -> None:
    if logged_in(chats) and scheme in SCHEMES:
        chats.store.keep_page_preference(chats.owner, "colour_scheme", scheme)


@store_errors
def keep_language(chats: SavedChats | None, language: str) -> None:
    if logged_in(chats) and (language in OFFERED or language == ""):
        chats.store.keep_page_preference(chats.owner, "language", language)
