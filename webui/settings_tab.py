"""The Settings tab: which model is loaded and how (backend, model, dtype, the backend's options),
and the generation controls, which show the loaded model's own defaults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from engines import GenerationArgs, ModelArgs

from .by_name import by_name
from .colour_scheme import colour_scheme_choice
from .controls import control
from .handlers import ENGINE_MODES, ChatHandlers, control_value
from .languages import text
from .languages.chooser import language_chooser
from .model_picker import model_picker, server_models
from .model_rights import ModelRights

# Rows of controls, named as the ModelArgs and GenerationArgs settings they set.
BACKEND_OPTION_ROWS = (
    ("max_concurrent", "max_model_len", "kv_cache_space_gb"),
    ("gpu_memory_utilization", "tensor_parallel_size", "enforce_eager"),
    ("threads", "batch_size", "gpu_layers"),
    ("mmproj",),
    ("convert_weights", "prompt_cache_gb", "prompt_cache_dir"),
    ("remote_model", "remote_api_key"),
)
GENERATION_ROWS = (
    ("temperature", "top_p", "top_k"),
    ("max_new_tokens", "repetition_penalty", "seed"),
)
# enforce_eager's three values have names on the page (ENGINE_MODES); a server's models are listed once asked for.
SHOWN_AS = {"enforce_eager": {"value": "auto", "choices": list(ENGINE_MODES)}, "remote_model": {"choices": [], "allow_custom_value": True}}


class SettingsTab:
    """Built inside the page's Tabs; ``wire`` once the handlers exist. ``model``: the controls of
    the ModelArgs settings a load takes, by name; ``generation``: those of GenerationArgs."""

    def __init__(self, demo: gr.Blocks, models_dir: Path | None, rights: ModelRights, loaded: Callable[[], frozenset[str]]) -> None:
        """``loaded``: what the Model field held for each model loaded now, which the picker marks."""
        # Until the page loads and asks the model for its own defaults.
        defaults = GenerationArgs()
        with gr.Tab(text("tab.settings"), id="settings"):
            self.status = gr.Markdown(elem_id="model-status")
            self.rights_note = gr.Markdown(elem_id="rights-note", visible=False)
            with gr.Group():
                with gr.Row():
                    self.model = {
                        "infer_backend": control(ModelArgs, "infer_backend"),
                        "model_name_or_path": control(ModelArgs, "model_name_or_path", scale=2),
                        "infer_dtype": control(ModelArgs, "infer_dtype"),
                    }
                self.picker = model_picker(demo, models_dir, self.model["model_name_or_path"], rights, loaded, self.status)
            with gr.Accordion(text("settings.backend_options"), open=False, elem_id="backend-options"):
                gr.Markdown(text("settings.backend_options_note"))
                for row in BACKEND_OPTION_ROWS:
                    with gr.Row():
                        self.model |= {name: control(ModelArgs, name, **SHOWN_AS.get(name, {})) for name in row}
                self.list_server_models = gr.Button(text("settings.list_server_models"), elem_id="list-server-models", size="sm")
                self.model |= {name: control(ModelArgs, name) for name in ("lora_adapters", "engine_args")}
            with gr.Row():
                self.load_btn = gr.Button(text("settings.load"), elem_id="load-btn", variant="primary")
                self.unload_btn = gr.Button(text("settings.unload"), elem_id="unload-btn")
            gr.Markdown(text("settings.generation"))
            self.generation: dict[str, gr.components.Component] = {}
            for row in GENERATION_ROWS:
                with gr.Row():
                    self.generation |= {name: control(GenerationArgs, name, control_value(defaults, name)) for name in row}
            self.generation["skip_special_tokens"] = control(GenerationArgs, "skip_special_tokens", defaults.skip_special_tokens)
            gr.Markdown(text("settings.appearance"))
            self.colour_scheme = colour_scheme_choice(demo)
            self.language = language_chooser(demo)

    def wire(self, demo: gr.Blocks, handlers: ChatHandlers, rights: ModelRights, message_box: gr.MultimodalTextbox,
             pdfs_as_images: gr.Checkbox, chat_model: gr.Dropdown, generation: dict[str, gr.components.Component]) -> None:
        """Load and unload, and the model's status as the page opens: each shows the status, what
        ``message_box`` takes, ``pdfs_as_images`` where the model reads images, the loaded models
        among the ``chat_model`` choices, and the model's defaults in ``generation``, the page's
        generation controls by setting name."""
        shown = {"status": self.status, "message_box": message_box, "pdfs_as_images": pdfs_as_images, "chat_model": chat_model, **generation}
        self.load_btn.click(inputs_kwargs=self.model, **by_name(handlers.load, shown), api_name="load", concurrency_limit=1)
        self.unload_btn.click(**by_name(handlers.unload, shown), api_name="unload", concurrency_limit=1)
        # Not queued: the status must show even while the queue is full (it only reads the loaded models).
        demo.load(**by_name(handlers.model_status, shown), api_visibility="private", queue=False)

        def list_models(address: str, key: str, page_request: gr.Request) -> dict:
            return server_models(rights, address, key, page_request)

        self.list_server_models.click(list_models, [self.model["model_name_or_path"], self.model["remote_api_key"]], self.model["remote_model"],
                                      api_visibility="private", concurrency_limit=None)

        # Others see the model settings read-only; the handlers that load, unload and list check again.
        management = [*self.model.values(), *self.picker, self.list_server_models, self.load_btn, self.unload_btn]

        def show_rights(page_request: gr.Request) -> dict[gr.components.Component, Any]:
            note = rights.note(page_request)
            return {self.rights_note: gr.update(value=note, visible=bool(note)), **{part: gr.update(interactive=not note) for part in management}}

        demo.load(show_rights, None, [self.rights_note, *management], api_visibility="private", queue=False)
