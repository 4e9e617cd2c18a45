"""The Settings tab's list of the models on this machine; picking one fills the Model field. And
the models a remote server serves, listed for an admin who gave its address.

Admins see where each model is; other users, who cannot load them, see their names only: where
the server keeps its files is none of their business. Only admins list a server's models: the
server would otherwise fetch any address a visitor names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gradio as gr

from engines import ChatError
from engines.backends.remote import served_models
from engines.model_files.catalog import FoundModel, find_models
from engines.model_files.server_address import is_server_address, server_address
from limits import size_text

from .languages import said, text
from .model_rights import ModelRights


def label(model: FoundModel, loaded: bool = False) -> str:
    reads = "" if model.reads is None else " · reads " + ", ".join(("text", *model.reads))
    return f"{'● ' if loaded else ''}{model.name} · {model.where} · {model.format} · {size_text(model.size)}{reads}"


def picker_choices(models_dir: Path | None, admin: bool = True, loaded: frozenset[str] = frozenset()) -> dict:
    """The picker rescanned, with nothing chosen: the Model field says what will be loaded.
    For an ``admin``, each choice is the model's path and the note names the models folder.
    The models ``loaded`` (what their Model field held) are marked ●."""
    sources = said("settings.picker_cache") + said("settings.picker_add_folder") if admin else said("settings.picker_cache")
    if models_dir:
        sources = said("settings.picker_folder", folder=models_dir) if admin else said("settings.picker_models_folder")
    return gr.update(
        choices=[(label(model, model.value in loaded), model.value if admin else model.name) for model in find_models(models_dir)], value=None,
        info=said("settings.picker_info", sources=sources),
    )


def model_picker(demo: gr.Blocks, models_dir: Path | None, model_path: gr.Textbox, rights: ModelRights,
                 loaded: Callable[[], frozenset[str]], status: gr.Markdown) -> list[gr.components.Component]:
    """The picker and its rescan button, filled when the page opens and as the model ``status``
    changes; returns both. ``loaded``: what the Model field held for each model loaded now."""
    with gr.Row(equal_height=True):
        picker = gr.Dropdown([], value=None, label=text("settings.models_here"), elem_id="model-picker", scale=4)
        rescan = gr.Button(text("settings.rescan"), elem_id="rescan-models", size="sm", scale=0, min_width=100)

    def choices(page_request: gr.Request) -> dict:
        return picker_choices(models_dir, rights.is_admin(page_request), loaded())

    gr.on([demo.load, rescan.click, status.change], choices, None, picker, api_visibility="private", queue=False)
    picker.input(lambda value: value, picker, model_path, api_visibility="private", queue=False)
    # A path typed by hand is no longer the model picked.
    model_path.input(lambda: None, None, picker, api_visibility="private", queue=False)
    return [picker, rescan]


def server_models(rights: ModelRights, address: str, key: str, page_request: gr.Request | None = None) -> dict:
    """The models of the server at ``address`` (the Model field), asked with ``key``, as the
    choices of the Settings tab's "Model on the server"; for an admin only."""
    rights.check_admin(page_request)
    if not is_server_address(address):
        raise gr.Error(said("settings.no_server_address"), print_exception=False)
    try:
        models = served_models(server_address(address), key.strip() or None)
    except ChatError as error:
        raise gr.Error(str(error), print_exception=False) from None
    names = [card["id"] for card in models]
    return gr.update(choices=names, value=names[0], info=said("settings.server_models", count=len(names)))
