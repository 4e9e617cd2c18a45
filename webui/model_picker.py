"""The Settings tab's list of the models on this machine; picking one fills the Model field."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from engines.model_catalog import FoundModel, find_models
from limits import size_text


def label(model: FoundModel) -> str:
    reads = "" if model.reads is None else " · reads " + ", ".join(("text", *model.reads))
    return f"{model.name} · {model.where} · {model.format} · {size_text(model.size)}{reads}"


def picker_choices(models_dir: Path | None) -> dict:
    """The picker rescanned, with nothing chosen: the Model field says what will be loaded."""
    return gr.update(choices=[(label(model), model.value) for model in find_models(models_dir)], value=None)


def model_picker(demo: gr.Blocks, models_dir: Path | None, model_path: gr.Textbox) -> list[gr.components.Component]:
    """The picker and its rescan button, filled when the page opens; returns both."""
    where = f"From {models_dir}/, the" if models_dir else "From the"
    more = "" if models_dir else " (app.py --models-dir DIR adds a folder of your own)"
    with gr.Row(equal_height=True):
        picker = gr.Dropdown(
            [], value=None, label="Models on this machine", elem_id="model-picker", scale=4,
            info=f"{where} Hugging Face cache and the embedded default{more}. Picking one fills the Model field.",
        )
        rescan = gr.Button("↻ Rescan", elem_id="rescan-models", size="sm", scale=0, min_width=100)
    gr.on([demo.load, rescan.click], lambda: picker_choices(models_dir), None, picker, api_visibility="private", queue=False)
    picker.input(lambda value: value, picker, model_path, api_visibility="private", queue=False)
    # A path typed by hand is no longer the model picked.
    model_path.input(lambda: None, None, picker, api_visibility="private", queue=False)
    return [picker, rescan]
