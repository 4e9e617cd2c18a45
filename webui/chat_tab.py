"""The Chat tab: the conversation, the message box and its buttons, and beside them the chat's
own settings (system prompt, thinking, tools, reply format) and its conversation file."""

from __future__ import annotations

from typing import Any

import gradio as gr

from engines import GenerationArgs
from engines.context_settings import ContextPolicy, ContextSettings
from engines.prompt.documents import DOCUMENT_EXTENSIONS
from engines.reply_format import ReplyFormatChoice
from library.whole_document import LongDocumentSettings
from tools import ToolSettings

from . import replying
from .by_name import by_name
from .controls import control
from .handlers import MEDIA_KINDS, ChatHandlers, control_value
from .languages import text
from .page_bridge import BRIDGE_ID, taking
from .user_turns import in_users_turn

TOOLS_EXAMPLE = """[{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"""


class ChatTab:
    """Built inside the page's Tabs; ``wire`` once the generation controls exist. After it,
    ``replies`` are the events that write a reply, ``changes`` the others that change the
    conversation, and ``imported`` a conversation file read into it. ``run_tools``: the controls
    of the chat's ToolSettings (which tools run, for how many answers), by setting name;
    ``context_policy``: what the chat becomes past the model's context (the server's default first)."""

    def __init__(self, context_policy: ContextPolicy = "compact") -> None:
        with gr.Tab(text("tab.chat"), id="chat"), gr.Row(equal_height=False):
            with gr.Column(scale=3):
                self.chatbot = gr.Chatbot(
                    elem_id="chatbot",
                    show_label=False,
                    height="68vh",
                    editable="all",
                    buttons=["copy", "copy_all"],
                    feedback_options=None,
                    placeholder=text("chat.empty"),
                )
                self.message_box = gr.MultimodalTextbox(
                    elem_id="chat-input",
                    show_label=False,
                    file_count="multiple",
                    file_types=[*MEDIA_KINDS, *DOCUMENT_EXTENSIONS],
                    sources=["upload"],
                    placeholder=text("chat.box"),
                    autofocus=True,
                    max_lines=12,
                )
                # What the page's scripts send: the ‹k/n› arrows, a say about tool calls, a python run's output.
                self.bridge = gr.Textbox(elem_id=BRIDGE_ID, visible="hidden")
                self.attachments_note = gr.Markdown("", elem_id="attachments-note")
                self.pdfs_as_images = gr.Checkbox(False, label=text("chat.pdfs_as_images"),
                                                  elem_id="pdfs-as-images", visible=False, container=False)
                with gr.Row(elem_id="chat-buttons"):
                    self.stop_btn = gr.Button(text("chat.stop"), elem_id="stop-btn", variant="stop", size="sm", visible=False)
                    self.regenerate_btn = gr.Button(text("chat.regenerate"), elem_id="regenerate-btn", size="sm")
                    self.continue_btn = gr.Button(text("chat.continue"), elem_id="continue-btn", size="sm")
                    self.undo_btn = gr.Button(text("chat.undo"), elem_id="undo-btn", size="sm")
                    self.clear_btn = gr.Button(text("chat.clear"), elem_id="clear-btn", size="sm")
            with gr.Column(scale=1, min_width=280):
                # Any id, so that a saved chat shows the model it asked even when that is not loaded now.
                # Shown where the server keeps several models (ChatHandlers.model_choices).
                self.chat_model = gr.Dropdown([("", "")], value="", label=text("chat.model"), elem_id="chat-model",
                                              allow_custom_value=True, info=text("chat.model_info"), visible=False)
                self.system = gr.Textbox(
                    "", label=text("chat.system"), elem_id="system-prompt", lines=4,
                    placeholder=text("chat.system_placeholder"),
                )
                self.enable_thinking = control(GenerationArgs, "enable_thinking", control_value(GenerationArgs(), "enable_thinking"))
                self.context_policy = control(ContextSettings, "context_policy", context_policy)
                self.long_documents = control(LongDocumentSettings, "long_documents")
                with gr.Accordion(text("chat.tools"), open=False, elem_id="tools-panel"):
                    self.run_tools = {name: control(ToolSettings, name, value) for name, value in ToolSettings()}
                    with gr.Row():
                        self.tool_servers = gr.Markdown("", elem_id="mcp-servers", visible=False)
                        self.refresh_tools = gr.Button("↻", elem_id="refresh-tools", size="sm", scale=0, min_width=40, visible=False)
                    self.tools = gr.Textbox(
                        "", label=text("chat.function_schemas"), elem_id="tools", lines=6,
                        placeholder=TOOLS_EXAMPLE, info=text("chat.function_schemas_info"),
                    )
                with gr.Accordion(text("chat.reply_format"), open=False):
                    self.reply_format = control(ReplyFormatChoice, "reply_format")
                    self.reply_schema = control(ReplyFormatChoice, "reply_schema", "")
                with gr.Accordion(text("chat.conversation_file"), open=False):
                    with gr.Row():
                        self.export_btn = gr.Button(text("chat.export_json"), elem_id="export-btn", size="sm")
                        self.export_md_btn = gr.Button(text("chat.export_markdown"), elem_id="export-md-btn", size="sm")
                    self.export_file = gr.File(label=text("chat.exported"), elem_id="export-file", visible=False)
                    self.import_btn = gr.UploadButton(text("chat.import_json"), elem_id="import-btn", file_types=[".json"], size="sm")
                self.shortcuts_btn = gr.Button(text("chat.shortcuts"), elem_id="shortcuts-btn", size="sm", variant="secondary")

    def wire(self, demo: gr.Blocks, handlers: ChatHandlers, session: gr.State, generation: dict[str, gr.components.Component]) -> None:
        """The chat's events; each reply is written with the chat's settings and ``generation``,
        the controls of GenerationArgs settings by name."""
        offer = {"fn": handlers.offered_tools, "outputs": [self.run_tools["run_tools"], self.tool_servers, self.refresh_tools], "queue": False, "api_visibility": "private"}
        demo.load(**offer)
        self.refresh_tools.click(**offer)
        self.shortcuts_btn.click(None, js="() => window.anychatShortcuts && window.anychatShortcuts()")
        chat_settings = {"system": self.system, "tools": self.tools, "reply_format": self.reply_format, "reply_schema": self.reply_schema,
                         "chat_model": self.chat_model, "context_policy": self.context_policy,
                         "long_documents": self.long_documents, **self.run_tools, **generation}
        chat = {"chatbot": self.chatbot, "message_box": self.message_box, "chat_model": self.chat_model}
        self.chat_model.focus(handlers.model_choices, None, self.chat_model, queue=False, api_visibility="private")
        # Picked by the user, a model brings its own defaults, as a load does; a switch of chats,
        # which sets the list too, brings back the chat's own settings instead (it is not an input).
        self.chat_model.input(inputs=[self.chat_model], **by_name(handlers.picked_model_defaults, generation), queue=False,
                              api_visibility="private")
        # Generation is bounded by the engine's own queue; the page never serialises users.
        streaming: dict[str, Any] = {"concurrency_limit": None, "show_progress": "minimal"}

        # Stop shows while a reply is written; a send meanwhile gets a note and goes no further.
        started = {"fn": replying.start, "inputs": [session], "outputs": self.stop_btn, "concurrency_limit": None, "api_visibility": "private"}
        self.replies = [
            self.message_box.submit(**started).success(inputs=[session, self.message_box], **by_name(handlers.send, chat),
                                                       inputs_kwargs=chat_settings, api_name="chat", **streaming),
            self.regenerate_btn.click(**started).success(inputs=[session], **by_name(handlers.regenerate, chat),
                                                         inputs_kwargs=chat_settings, api_name="regenerate", **streaming),
            self.continue_btn.click(**started).success(inputs=[session], **by_name(handlers.continue_reply, chat),
                                                       inputs_kwargs=chat_settings, api_name="continue_reply", **streaming),
            self.chatbot.edit(inputs=[session], **by_name(handlers.edit, {**chat, "stop_btn": self.stop_btn}), inputs_kwargs=chat_settings,
                              api_visibility="private", **streaming),
        ]
        # Cheap without documents in the box; with them, each is read and counted once (webui/attachments.py).
        # Not one at a time across users: one person's long PDF must not hold up everyone's note.
        note = {"fn": handlers.attachments_note, "inputs": [session, self.message_box], "outputs": self.attachments_note,
                "inputs_kwargs": {"system": self.system, "tools": self.tools, "chat_model": self.chat_model, **self.run_tools},
                "show_progress": "hidden", "concurrency_limit": None, "trigger_mode": "always_last",
                "api_visibility": "private"}
        for reply in self.replies:
            # Queued, so that its answer comes in order in the page's one stream of answers. Answered
            # apart (queue=False), one that a busy machine delayed could land after a later one: the
            # edit of a document's chip ends at once, while the edit of the text beside it answers, and
            # its Stop-shown came in after the reply's own Stop-hidden, leaving Stop shown for good.
            # always_last: the page drops a follow-up triggered while the same one is pending ("once",
            # Gradio's default), and the chip's, slow on a busy machine, was still pending as the
            # text's reply ended: the one that would have hidden Stop never ran. Deferred instead, it
            # runs after, and sees the reply ended.
            reply.then(replying.stop_button, [session], self.stop_btn, concurrency_limit=None, show_progress="hidden",
                       trigger_mode="always_last", api_visibility="private")
            # Counted again once the reply is in: the conversation the documents join has grown. This also
            # clears a note that landed stale: the box's change as a message is sent and its change as the send
            # empties it run at once when the second comes before Gradio has sent the first (always_last
            # defers only a change that comes later), and on a busy machine the first answered last.
            reply.then(**note)
        self.stop_btn.click(handlers.stop, [session], None, queue=False, api_name="stop")
        # Answered at once, beside the reply that waits on it; each send, however close to the one before.
        self.bridge.change(handlers.settle, [session, self.bridge], None, queue=False, trigger_mode="multiple", api_visibility="private")
        self.pdfs_as_images.change(handlers.pdfs_as_images, [session, self.pdfs_as_images], None, queue=False, api_visibility="private")
        self.pdfs_as_images.change(**note)
        self.message_box.change(**note)
        self.bridge.change(inputs=[session, self.bridge], **by_name(taking("version", handlers.switch_version), {"chatbot": self.chatbot}),
                           api_name="switch_version")
        self.changes = [
            self.undo_btn.click(inputs=[session], **by_name(handlers.undo, chat), api_name="undo"),
            self.clear_btn.click(inputs=[session], **by_name(handlers.clear, chat), api_name="clear"),
            self.chatbot.clear(inputs=[session], **by_name(handlers.clear, chat), api_visibility="private"),
        ]
        # Files with media inside, written or read: seconds each. Not one at a time across users
        # (one person's large file must not hold up everyone's), but each user's in their turn.
        files = {"concurrency_limit": None}
        self.export_btn.click(in_users_turn(handlers.export), [session, self.system], self.export_file, api_visibility="private", **files)
        self.export_md_btn.click(in_users_turn(handlers.export_markdown), [session, self.system], self.export_file, api_visibility="private", **files)
        self.imported = self.import_btn.upload(inputs=[session, self.import_btn], **by_name(in_users_turn(handlers.import_), {"chatbot": self.chatbot, "system": self.system}),
                                               api_name="import_conversation", **files)
