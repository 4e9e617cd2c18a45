"""Named presets: a user saves the system prompt and generation settings shown under a name, and
picks them again later, in any chat and any tab, from the chat store (each user their own).

A preset holds the generation settings the page has controls for (GenerationArgs's, by name, the
same ones a chat keeps), checked by GenerationArgs as a reply's are. Whose presets they are is the
tab's SavedChats's owner, settled when the page opened: a name sent to the raw endpoints reads
only the caller's own presets.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.events import Dependency

from chat.saved_chats import SavedChats
from engines import ConfigError, GenerationArgs

from .by_name import by_name
from .chat_sidebar import opened, store_errors
from .languages import said, text
from .user_turns import in_users_turn

MAX_NAME = 100


class ChatPresets:
    """Built inside the sidebar; ``wire`` once the controls it saves exist."""

    def __init__(self) -> None:
        with gr.Accordion(text("presets.title"), open=False, elem_id="presets"):
            self.list = gr.Dropdown([], label=text("presets.preset"), elem_id="preset-list", info=text("presets.preset_info"))
            self.name = gr.Textbox(label=text("presets.name"), placeholder=text("presets.name_placeholder"), elem_id="preset-name")
            with gr.Row():
                self.save_btn = gr.Button(text("presets.save"), elem_id="save-preset-btn", size="sm")
                self.delete_btn = gr.Button(text("presets.delete"), elem_id="delete-preset-btn", size="sm")

    def wire(self, opened: Dependency, chats: gr.State, system: gr.Textbox, generation: dict[str, gr.components.Component]) -> None:
        """``opened``: the page's opening, which settles whose presets they are (``chats``)."""
        private = {"api_visibility": "private", "concurrency_limit": None}
        listed = {"preset_list": self.list, "preset_name": self.name}
        opened.success(inputs=chats, **by_name(in_users_turn(list_presets), listed), **private)
        self.save_btn.click(inputs=[chats, self.name, system], inputs_kwargs=generation, **by_name(in_users_turn(save_preset), listed), **private)
        self.list.input(inputs=[chats, self.list], **by_name(in_users_turn(apply_preset), {"system": system, "preset_name": self.name, **generation}), **private)
        self.delete_btn.click(inputs=[chats, self.name], **by_name(in_users_turn(delete_preset), listed), **private)


def choices(chats: SavedChats, chosen: str | None = None) -> dict[str, Any]:
    return gr.update(choices=[preset.name for preset in chats.store.presets(chats.owner)], value=chosen)


@store_errors
def list_presets(chats: SavedChats | None) -> dict[str, Any]:
    return {"preset_list": choices(opened(chats))}


@store_errors
def save_preset(chats: SavedChats | None, name: str, system: str, **generation: Any) -> dict[str, Any]:
    """Keep the ``system`` prompt and ``generation`` settings shown as preset ``name`` (in place of one so named)."""
    chats = opened(chats)
    name = " ".join((name or "").split())
    if not name:
        raise gr.Error(said("presets.needs_name"), print_exception=False)
    if len(name) > MAX_NAME:
        raise gr.Error(said("presets.name_too_long", most=MAX_NAME, length=len(name)), print_exception=False)
    try:
        settings = GenerationArgs.chosen(**{key: value for key, value in generation.items() if key in chats.setting_names})
    except ConfigError as error:
        raise gr.Error(said("presets.not_saved", error=error), print_exception=False) from None
    chats.store.save_preset(chats.owner, name, system or "", settings)
    gr.Info(said("presets.saved", name=name))
    return {"preset_list": choices(chats, name), "preset_name": name}


@store_errors
def apply_preset(chats: SavedChats | None, name: str | None) -> dict[str, Any]:
    """The preset's system prompt and settings, into the page's controls (the chat keeps them with its next reply)."""
    chats = opened(chats)
    preset = chats.store.preset(chats.owner, name or "")
    if preset is None:
        raise gr.Error(said("presets.no_such_preset", name=name), print_exception=False)
    return {"system": preset.system, "preset_name": preset.name,
            **{key: value for key, value in preset.generation.items() if key in chats.setting_names}}


@store_errors
def delete_preset(chats: SavedChats | None, name: str) -> dict[str, Any]:
    chats = opened(chats)
    name = " ".join((name or "").split())
    if not chats.store.delete_preset(chats.owner, name):
        raise gr.Error(said("presets.no_such_to_delete", name=name), print_exception=False)
    gr.Info(said("presets.deleted", name=name))
    return {"preset_list": choices(chats), "preset_name": ""}
