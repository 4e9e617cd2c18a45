"""The page: a Chat tab and a Settings tab over one shared ModelSlot."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from engines import BACKEND_NAMES, GenerationArgs, ModelSlot
from engines.backends.registry import AUTO
from engines.model_files.model_args import DTYPES
from limits import Limits

from . import replying
from .chat_sidebar import SIDEBAR_HEAD, ChatSidebar
from .conversation import ChatSession
from .handlers import ENGINE_MODES, ChatHandlers
from .model_picker import model_picker
from .model_rights import ModelRights
from .shortcuts import ESCAPE_STOPS

# System fonts only: the page must not fetch anything from outside this machine.
THEME = gr.themes.Soft(
    primary_hue="indigo",
    neutral_hue="slate",
    font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"],
)

CSS = """
.gradio-container { max-width: 1280px !important; margin: 0 auto; }
#chatbot { flex-grow: 1; }
#chatbot img { max-height: 180px; width: auto; }
#title h1 { margin: 0.2em 0 0; font-size: 1.6em; }
#title p { margin: 0; opacity: 0.7; }
#model-status { min-height: 2.5em; }
#chat-buttons button { min-width: 0; }
#chatbot .message:has(.reply-stats) { background: none; border: none; box-shadow: none; padding-top: 0; }
.reply-stats { font-size: 0.78em; opacity: 0.65; }
"""

# What launch() or gr.mount_gradio_app() need besides the Blocks.
PAGE_KWARGS = {"theme": THEME, "css": CSS, "head": SIDEBAR_HEAD}

TOOLS_EXAMPLE = """[{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"""


def build_demo(slot: ModelSlot, rights: ModelRights = ModelRights(), limits: Limits = Limits(),
               models_dir: Path | None = None) -> gr.Blocks:
    """The page; serve it with ``PAGE_KWARGS``, ``max_file_size=limits.max_upload_size`` and a
    queue of ``limits.max_queue_size``. ``models_dir``: where the model picker looks besides the
    Hugging Face cache."""
    # Until the page loads and asks the model for its own defaults.
    defaults = GenerationArgs()
    with gr.Blocks(title="anychat") as demo:
        session = gr.State(ChatSession())
        sidebar = ChatSidebar()
        gr.Markdown("# anychat\nChat with local models, on any inference backend.", elem_id="title")
        with gr.Tabs():
            with gr.Tab("Chat", id="chat"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3):
                        chatbot = gr.Chatbot(
                            elem_id="chatbot",
                            show_label=False,
                            height="68vh",
                            editable="user",
                            buttons=["copy", "copy_all"],
                            feedback_options=None,
                            placeholder="**Start a conversation.** Multimodal models also read the images, video or audio you attach.",
                        )
                        message_box = gr.MultimodalTextbox(
                            elem_id="chat-input",
                            show_label=False,
                            file_count="multiple",
                            file_types=["image", "video", "audio"],
                            sources=["upload"],
                            placeholder="Message · Enter to send, Shift+Enter for a new line",
                            autofocus=True,
                            max_lines=12,
                        )
                        with gr.Row(elem_id="chat-buttons"):
                            stop_btn = gr.Button("■ Stop", elem_id="stop-btn", variant="stop", size="sm", visible=False)
                            regenerate_btn = gr.Button("↻ Regenerate", elem_id="regenerate-btn", size="sm")
                            undo_btn = gr.Button("↶ Undo", elem_id="undo-btn", size="sm")
                            clear_btn = gr.Button("✕ Clear", elem_id="clear-btn", size="sm")
                    with gr.Column(scale=1, min_width=280):
                        system = gr.Textbox(
                            "", label="System prompt", elem_id="system-prompt", lines=4,
                            placeholder="You are a helpful assistant.",
                        )
                        enable_thinking = gr.Checkbox(
                            True, label="Enable thinking", elem_id="enable-thinking",
                            info="For reasoning models whose template supports it.",
                        )
                        with gr.Accordion("Tools", open=False):
                            tools = gr.Textbox(
                                "", label="Function schemas (JSON list)", elem_id="tools", lines=6,
                                placeholder=TOOLS_EXAMPLE,
                            )
                        with gr.Accordion("Conversation file", open=False):
                            export_btn = gr.Button("Export JSON", elem_id="export-btn", size="sm")
                            export_file = gr.File(label="Exported", elem_id="export-file", visible=False)
                            import_btn = gr.UploadButton("Import JSON", elem_id="import-btn", file_types=[".json"], size="sm")
            with gr.Tab("Settings", id="settings"):
                status = gr.Markdown(elem_id="model-status")
                rights_note = gr.Markdown(elem_id="rights-note", visible=False)
                with gr.Group():
                    with gr.Row():
                        backend = gr.Dropdown([AUTO, *BACKEND_NAMES], value=AUTO, label="Backend", elem_id="backend",
                                              info="auto: llamacpp for GGUF files where installed, else huggingface")
                        model_path = gr.Textbox(
                            label="Model", elem_id="model-path", scale=2,
                            placeholder="Local directory, .gguf file or Hub name (empty: embedded SmolLM2-135M-Instruct)",
                        )
                        dtype = gr.Dropdown(list(DTYPES), value="auto", label="dtype", elem_id="dtype")
                    picker = model_picker(demo, models_dir, model_path, rights)
                with gr.Accordion("Backend options", open=False, elem_id="backend-options"):
                    gr.Markdown("Empty or 0: the backend's default. A backend refuses the options it does not take, and says which backends do.")
                    # Named as the ModelArgs settings they set.
                    with gr.Row():
                        backend_options = {
                            "max_concurrent": gr.Number(None, precision=0, label="Max concurrent requests", elem_id="max-concurrent"),
                            "max_model_len": gr.Number(None, precision=0, label="Max model length (tokens)", elem_id="max-model-len"),
                            "kv_cache_space_gb": gr.Number(None, label="KV cache on CPU (GiB, vllm)", elem_id="kv-cache-gb"),
                        }
                    with gr.Row():
                        backend_options |= {
                            "gpu_memory_utilization": gr.Number(None, label="GPU memory fraction", elem_id="gpu-memory-utilization"),
                            "tensor_parallel_size": gr.Number(None, precision=0, label="Tensor parallel size (0: all GPUs)", elem_id="tensor-parallel-size"),
                            "enforce_eager": gr.Dropdown(list(ENGINE_MODES), value="auto", label="Graphs (auto: eager on CPU)", elem_id="engine-mode"),
                        }
                    with gr.Row():
                        backend_options |= {
                            "threads": gr.Number(None, precision=0, label="CPU threads (llamacpp; 0: physical cores)", elem_id="threads"),
                            "batch_size": gr.Number(None, precision=0, label="Prompt batch size (llamacpp)", elem_id="batch-size"),
                            "gpu_layers": gr.Number(None, precision=0, label="GPU layers (llamacpp; -1: all)", elem_id="gpu-layers"),
                        }
                    backend_options["lora_adapters"] = gr.Textbox(label="LoRA adapter directories (comma-separated)", elem_id="lora-adapters")
                    backend_options["engine_args"] = gr.Textbox(
                        label="Other engine arguments (JSON object)", elem_id="engine-args", placeholder='{"max_num_seqs": 8}',
                    )
                with gr.Row():
                    load_btn = gr.Button("Load", elem_id="load-btn", variant="primary")
                    unload_btn = gr.Button("Unload", elem_id="unload-btn")
                gr.Markdown("### Generation\nDefaults come from the loaded model's generation config; changes apply to this tab only.")
                # Named as the GenerationArgs settings they set.
                with gr.Row():
                    generation = {
                        "temperature": gr.Slider(0, 2, defaults.temperature, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"),
                        "top_p": gr.Slider(0.01, 1, defaults.top_p, step=0.01, label="top_p", elem_id="top-p"),
                        "top_k": gr.Slider(0, 200, defaults.top_k, step=1, label="top_k (0 = off)", elem_id="top-k"),
                    }
                with gr.Row():
                    generation |= {
                        "max_new_tokens": gr.Slider(1, 8192, defaults.max_new_tokens, step=1, label="max_new_tokens", elem_id="max-new-tokens"),
                        "repetition_penalty": gr.Slider(0.5, 2, defaults.repetition_penalty, step=0.01, label="Repetition penalty", elem_id="repetition-penalty"),
                        "seed": gr.Number(None, precision=0, minimum=0, label="Seed (empty = random)", elem_id="seed"),
                    }
                generation["skip_special_tokens"] = gr.Checkbox(True, label="Skip special tokens", elem_id="skip-special-tokens")
        generation["enable_thinking"] = enable_thinking

        handlers = ChatHandlers(slot, tuple(generation), rights, limits)
        chat_settings = {"system": system, "tools": tools, **generation}
        chat_outputs = [chatbot, message_box]
        model_outputs = [status, message_box, *generation.values()]
        # Generation is bounded by the engine's own queue; the page never serialises users.
        streaming = {"concurrency_limit": None, "show_progress": "minimal"}

        # Stop shows while a reply is written; a send meanwhile gets a note and goes no further.
        started = {"fn": replying.start, "inputs": [session], "outputs": stop_btn, "concurrency_limit": None, "api_visibility": "private"}
        replies = [
            message_box.submit(**started).success(handlers.send, [session, message_box], chat_outputs, inputs_kwargs=chat_settings, api_name="chat", **streaming),
            regenerate_btn.click(**started).success(handlers.regenerate, [session], chat_outputs, inputs_kwargs=chat_settings, api_name="regenerate", **streaming),
            chatbot.edit(handlers.edit, [session], chat_outputs, inputs_kwargs=chat_settings, api_visibility="private", **streaming),
        ]
        chatbot.edit(replying.show_stop, None, stop_btn, queue=False, api_visibility="private")
        for reply in replies:
            reply.then(replying.stop_button, [session], stop_btn, queue=False, api_visibility="private")
        stop_btn.click(handlers.stop, [session], None, queue=False, api_name="stop")
        changes = [
            undo_btn.click(handlers.undo, [session], chat_outputs, api_name="undo"),
            clear_btn.click(handlers.clear, [session], chat_outputs, api_name="clear"),
            chatbot.clear(handlers.clear, [session], chat_outputs, api_visibility="private"),
        ]
        export_btn.click(handlers.export, [session, system], export_file, api_visibility="private")
        imported = import_btn.upload(handlers.import_, [session, import_btn], [chatbot, system], api_name="import_conversation")
        sidebar.wire(demo, session, chatbot, system, tools, replies, changes, imported)
        demo.load(None, js=ESCAPE_STOPS)
        model_choice = {"infer_backend": backend, "model_name_or_path": model_path, "infer_dtype": dtype, **backend_options}
        load_btn.click(handlers.load, None, model_outputs, inputs_kwargs=model_choice, api_name="load", concurrency_limit=1)
        unload_btn.click(handlers.unload, None, model_outputs, api_name="unload", concurrency_limit=1)
        demo.load(handlers.model_status, None, model_outputs, api_visibility="private")

        # Others see the model settings read-only; the load and unload handlers check again.
        management = [backend, model_path, dtype, *picker, *backend_options.values(), load_btn, unload_btn]

        def show_rights(request: gr.Request) -> tuple:
            note = rights.note(request)
            return gr.update(value=note, visible=bool(note)), *[gr.update(interactive=not note)] * len(management)

        demo.load(show_rights, None, [rights_note, *management], api_visibility="private", queue=False)
    return demo

