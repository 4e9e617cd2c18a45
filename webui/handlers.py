"""What the page's buttons do: plain functions over one tab's ChatSession and the shared LoadedModels.

The page hands each handler its controls by name (Gradio's ``inputs_kwargs``): the chat
handlers get ``system``, ``tools``, ``reply_format``, ``reply_schema``, ``chat_model``,
``context_policy``, ``long_documents``, the tool settings and the generation settings as keywords
named as in their settings' declarations, and ``load`` gets the model settings named as in
ModelArgs. Handlers name what they update too (webui/by_name.py): the chat handlers are async
generators that yield the ``chatbot`` messages and, where it changes, the ``message_box`` and
``chat_model``; the model's handlers return its ``status``, the ``message_box``, ``pdfs_as_images``,
``chat_model`` and the generation controls' defaults by setting name. Adding
a control is adding it to the layout's dict; tests drive the handlers directly, without a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr
import psutil
from gradio.utils import get_upload_folder

from chat import actions, approval, browser_python
from chat.actions import Refused
from chat.conversation_file import read_conversation, write_conversation
from chat.documents import split_files
from chat.reply import Reply, chat_model
from chat.session import ChatSession, kept
from chat.turns import Turn, model_request
from engines import ChatError, ChatModel, ConfigError, GenerationArgs, LoadedModels
from engines.prompt.documents import DOCUMENT_EXTENSIONS
from engines.request import MEDIA_KINDS
from limits import Limits
from store import MessageTree
from tools import ToolCatalog, ToolSettings

from . import reply_view
from .attachments import is_chip, tokens_note
from .chat_view import edited_reply, render, turn_of_message
from .inert_markdown import as_written
from .languages import said
from .markdown_export import write_markdown
from .model_rights import ModelRights
from .notices import refusals_shown, toast, words
from .page_bridge import sent
from .replying import one_reply_at_a_time
from .tool_panel import offered_tools
from .user_turns import page_user
from .versions import picked

ENGINE_MODES = {"auto": None, "eager": True, "compiled": False}


def backend_options(**values: Any) -> dict[str, Any]:
    """The Settings tab's backend options as ModelArgs settings. Only the fields a person filled
    in are passed, so every other setting keeps the backend's own default (and a backend that
    refuses a setting is not sent an empty one). A number field shows 0 when empty, and 0 is no
    useful value of any of them, so 0 also means "the default"."""
    options = {}
    for name, value in values.items():
        if name == "enforce_eager":
            value = ENGINE_MODES[value or "auto"]
        elif name == "engine_args":
            value = parse_engine_args(value)
        elif isinstance(value, str):
            value = value.strip() or None
        else:
            value = value or None
        if value is not None:
            options[name] = value
    return options


def parse_engine_args(text: str | None) -> dict[str, Any] | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"Engine arguments are not valid JSON ({error}). Write a JSON object, like {{\"max_num_seqs\": 8}}.") from None
    if not isinstance(value, dict):
        raise ConfigError(f"Engine arguments must be a JSON object of argument names and values, like {{\"max_num_seqs\": 8}}; got {text[:60]}.")
    return value


def box(interactive: bool, text: str = "", files: list[str] | None = None) -> dict[str, Any]:
    return gr.update(value={"text": text, "files": files or []}, interactive=interactive)


def control_value(defaults: GenerationArgs, name: str) -> Any:
    """What a generation control shows for the model's default of setting ``name``."""
    if name == "temperature":
        return defaults.temperature if defaults.do_sample else 0.0
    if name == "enable_thinking":
        return True if defaults.enable_thinking is None else defaults.enable_thinking
    return getattr(defaults, name)


class ChatHandlers:
    """``control_names``: the generation settings the page has controls for, which show the
    loaded model's defaults. ``rights``: who may load and unload models,
    and with what; ``limits``: the sizes a conversation file may have; ``catalog``: the tools
    that may run (the app's, with its MCP servers'; without one, the built-in tools alone)."""

    def __init__(self, loaded_models: LoadedModels, control_names: tuple[str, ...], rights: ModelRights = ModelRights(), limits: Limits = Limits(),
                 catalog: ToolCatalog | None = None) -> None:
        self.loaded_models = loaded_models
        self.control_names = control_names
        self.rights = rights
        self.limits = limits
        self.catalog = catalog if catalog is not None else ToolCatalog()

    def offered_tools(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The Tools panel as the page opens and on Refresh: the catalog's tools and servers (webui/tool_panel.py)."""
        return offered_tools(self.catalog)

    # ---- chat

    @one_reply_at_a_time
    async def send(self, session: ChatSession, message: dict | None, page_request: gr.Request | None = None,
                   **settings: Any) -> AsyncIterator[dict[str, Any]]:
        text = ((message or {}).get("text") or "").strip()
        files = list((message or {}).get("files") or [])
        if not text and not files:
            yield {"chatbot": render(session.tree), "message_box": box(True)}
            return
        model = self._loaded(settings.get("chat_model", ""))
        try:
            await actions.add_message(session, text, files, model, self.limits, page_user(page_request), get_upload_folder())
        except ChatError as error:
            # The message stays in the box, to take the file out of it; the conversation is as it was.
            gr.Warning(str(error))
            yield {"chatbot": render(session.tree)}
            return
        async for update in self._answer(session, settings, page_request, emptied=box(True)):
            yield update

    @one_reply_at_a_time
    @refusals_shown
    async def regenerate(self, session: ChatSession, page_request: gr.Request | None = None, **settings: Any) -> AsyncIterator[dict[str, Any]]:
        actions.to_answer_again(session)
        async for update in self._answer(session, settings, page_request):
            yield update

    @one_reply_at_a_time
    @refusals_shown
    async def continue_reply(self, session: ChatSession, page_request: gr.Request | None = None,
                             **settings: Any) -> AsyncIterator[dict[str, Any]]:
        """Go on with the last reply (stopped, or cut at max_new_tokens): the model writes on from
        where it ended, into the same message."""
        actions.to_continue(session)
        async for update in self._answer(session, settings, page_request, continuing=True):
            yield update

    async def edit(self, session: ChatSession, edit: gr.EditData, page_request: gr.Request | None = None,
                   **settings: Any) -> AsyncIterator[dict[str, Any]]:
        """A past message was edited in the Chatbot. A user message is answered again from there;
        a reply's text (or a summary of earlier messages) becomes a new version of it, the
        conversation after it kept, and the model goes on from it at the next message. Gradio
        sends an edit of each of the messages it shows together (a reply's thinking, text and stats
        line; a message's text and its documents' chips), changed or not: a chip is not what the
        user wrote, and an unchanged part is no edit, so both are let be, before anything else (the
        one-reply guard would refuse the edit of the text beside them, and once one part's edit has
        made a new version, the index of the next may fall on another message)."""
        if is_chip(edit.value) or edited_text(edit.value) == edited_text(edit.previous_value):
            yield {}
            return
        async for update in self._edit(session, edit, page_request, **settings):
            yield update

    @one_reply_at_a_time
    @refusals_shown
    async def _edit(self, session: ChatSession, edit: gr.EditData, page_request: gr.Request | None, **settings: Any) -> AsyncIterator[dict[str, Any]]:
        tree = session.tree
        place = turn_of_message(tree, edit.index)
        turn = tree.messages[place]
        if turn.role == "assistant":
            actions.edit_reply(session, place, edited_reply(turn, edited_text(edit.previous_value), edited_text(edit.value)))
            await kept(session)  # the store may be slow: not on the event loop
            yield {"chatbot": render(tree)}
            return
        if turn.role != "user":
            yield {"chatbot": render(tree)}
            return
        actions.edit_message(session, place, edited_text(edit.value))
        # Stop is shown by this handler itself: the edit's data reaches only the listener the edit
        # triggers, so no start can run before it in one chain, and a listener of its own beside it
        # could land after a short reply had ended, leaving Stop shown for good. Every update shows
        # it: Gradio sends each update of a stream as a diff from the one before, which its client
        # applies in place to that one, and where the page had not applied it yet (on a loaded
        # machine the stream brought an edit's first updates before the page had read the event's
        # id, and the client handed them over together), an update leaving Stop out took the "shown"
        # out of the first: the reply, however long, was written with no Stop to press.
        async for update in self._answer(session, settings, page_request):
            yield {**update, "stop_btn": gr.update(visible=True)}

    def stop(self, session: ChatSession) -> None:
        session.reply.stop()

    @refusals_shown
    def undo(self, session: ChatSession) -> dict[str, Any]:
        """Remove the last user message and its reply (every version of it), and put the message back in the box."""
        turn = actions.undo(session)
        if turn is None:
            return {"chatbot": render(session.tree)}
        documents = [document.path for document in turn.documents if document.path and os.path.isfile(document.path)]
        return {"chatbot": render(session.tree), "message_box": box(True, turn.content, turn.files + documents)}

    @refusals_shown
    def clear(self, session: ChatSession) -> dict[str, Any]:
        """Remove every message, every version."""
        actions.clear(session)
        return {"chatbot": [], "message_box": box(True)}

    @refusals_shown
    def switch_version(self, session: ChatSession, picked_place: str) -> dict[str, Any]:
        """Show another version of a message (``picked_place``: its place, as a ‹k/n› arrow sends it) and
        the newest conversation after it; the next message continues that branch."""
        actions.show_version(session, picked(picked_place))
        return {"chatbot": render(session.tree)}

    def settle(self, session: ChatSession, bridged: str) -> None:
        """Hand the reply what it waits on, where the page's bridge sent it: the user's say about
        tool calls, or what a Python block printed when run in the browser."""
        if (say := sent(bridged, "approval")) is not None:
            approval.answer(session, str(say))
        elif (ran := sent(bridged, "run")) is not None:
            browser_python.finished(session, ran)

    async def _answer(self, session: ChatSession, settings: dict[str, Any], page_request: gr.Request | None,
                      emptied: dict[str, Any] | None = None, continuing: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The chat updates of one reply, asked for by ``page_request`` (``continuing``: the last reply,
        written on). The box stays editable (the next message may be typed while the reply
        streams), so only the first update may touch it: ``emptied``, the sent message taken out
        of it; later updates leave what is typed there alone. Once the tab has left the chat
        (``session.left``) the reply goes on being saved, but is no longer shown."""
        first = {"message_box": emptied} if emptied else {}
        reply = Reply(self.loaded_models, session, continuing, self.catalog, self.limits, tell=toast)
        async for messages in reply_view.shown(reply, dict(settings), page_user(page_request)):
            if not session.left:
                yield {"chatbot": messages, **first}
                first = {}
        if not session.left:
            # Among several models, a chat answered by the default one keeps that model from now on, as its own.
            picked = {"chat_model": reply.model_id} if self.loaded_models.several and not settings.get("chat_model") and reply.model_id else {}
            yield {"chatbot": render(session.tree), **picked}

    def attachments_note(self, session: ChatSession, message: dict | None, page_request: gr.Request | None = None, **settings: Any) -> str:
        """The note under the box: what its documents take of the loaded model's context, after the
        conversation so far (sent with the chat's ``settings``)."""
        model = self._loaded(settings.pop("chat_model", ""))
        _, documents, pdfs = split_files(list((message or {}).get("files") or []), actions.sends_pages(session, model))
        pages = " · ".join(said("attachments.as_images", name=os.path.basename(path)) for path in pdfs)
        if not documents:
            return f"📎 {pages}." if pages else ""
        conversation = ""
        if model is not None and any(turn.role == "user" and not turn.error for turn in session.turns):
            try:
                tools, settings = ToolSettings.split(settings, self.catalog)
                running = tuple(tools.tools(self.catalog).values())
                conversation = model.render_prompt(model_request([*session.turns, Turn(role="user")], running=running, **settings))
            except ChatError:
                conversation = ""
        note = tokens_note(model, documents, conversation, self.limits, page_user(page_request), searchable=session.keeper is not None)
        return f"{note} · {pages}." if pages else note

    def _loaded(self, model_id: str) -> ChatModel | None:
        """The chat's model (empty: the default model), where it is loaded (as Reply picks it)."""
        try:
            return chat_model(self.loaded_models, model_id)
        except ChatError:
            return None

    def pdfs_as_images(self, session: ChatSession, chosen: bool) -> None:
        session.pdfs_as_images = bool(chosen)

    # ---- conversation files

    def export(self, session: ChatSession, system: str) -> dict[str, Any]:
        """The conversation as a JSON file with its media inside, every version of its messages
        with it where the chat is saved, shown in the page for download."""
        return self._exported(write_conversation, "conversation.json", session, system)

    def export_markdown(self, session: ChatSession, system: str) -> dict[str, Any]:
        """The conversation as Markdown to read, its images inside (webui/markdown_export.py)."""
        return self._exported(write_markdown, "conversation.md", session, system)

    def _exported(self, write: Callable[[str, MessageTree[Turn], str, int], None], name: str, session: ChatSession, system: str) -> dict[str, Any]:
        """The file ``write`` makes of the conversation, written among the page's files, which are
        kept for a while and then deleted."""
        os.makedirs(get_upload_folder(), exist_ok=True)
        folder = tempfile.mkdtemp(prefix="anychat-export-", dir=get_upload_folder())
        path = os.path.join(folder, name)
        try:
            write(path, session.tree, system, self.limits.max_upload_size)
        except ChatError as error:
            shutil.rmtree(folder, ignore_errors=True)
            raise gr.Error(said("chat.export_failed", error=error), print_exception=False) from None
        return gr.update(value=path, visible=True)

    def import_(self, session: ChatSession, path: str) -> dict[str, Any]:
        """Show the file's conversation, every version of its messages, unsaved until the sidebar
        makes it a chat of its own; a file that cannot be imported leaves the conversation as it was."""
        try:
            actions.not_while_answering(session)
            conversation = read_conversation(path, self.limits, get_upload_folder())
            actions.take_conversation(session, conversation)
        except Refused as refused:
            raise gr.Error(words(refused.notice), print_exception=False) from None
        except ChatError as error:
            raise gr.Error(said("chat.import_failed", name=os.path.basename(path), error=error), print_exception=False) from None
        return {"chatbot": render(session.tree), "system": conversation.system_prompt}

    # ---- model

    def load(self, infer_backend: str, model_name_or_path: str, infer_dtype: str, page_request: gr.Request | None = None,
             progress: gr.Progress = gr.Progress(), **options: Any) -> dict[str, Any]:
        """Load a model with the Settings tab's choices (``options``: the backend options, named
        as ModelArgs settings), if ``page_request``'s user is an admin; on failure the previous model stays."""
        self.rights.check_admin(page_request)
        settings = {"infer_backend": infer_backend, "model_name_or_path": (model_name_or_path or "").strip() or None, "infer_dtype": infer_dtype}
        try:
            settings = self.rights.page_settings(settings | backend_options(**options))
            self.loaded_models.load(settings, progress=lambda fraction, message: progress(fraction, desc=message))
        except ChatError as error:
            kept = self.loaded_models.describe()
            gr.Warning(str(error))
            return {"status": said("settings.not_loaded", error=error, model=kept, memory=memory_line())}
        return self.model_status()

    def unload(self, page_request: gr.Request | None = None) -> dict[str, Any]:
        """Unload the default model (the one the status names first); another loaded becomes the default."""
        self.rights.check_admin(page_request)
        self.loaded_models.unload_default()
        return self.model_status()

    def model_choices(self) -> dict[str, Any]:
        """The loaded models a chat may ask, and first the default model (empty), whichever it is
        then; shown only where several models are kept."""
        models = self.loaded_models.models
        default = said("chat.default_model_named", model=models[0].model_id) if models else said("chat.default_model")
        return gr.update(choices=[(default, ""), *((model.model_id, model.model_id) for model in models)], visible=self.loaded_models.several)

    def model_status(self) -> dict[str, Any]:
        """The status line, the message box, the models a chat may ask, and the generation
        controls' defaults for the default model."""
        if self.loaded_models.empty:
            return {"status": f"{self.loaded_models.describe()} {memory_line()}", "pdfs_as_images": gr.update(visible=False),
                    "message_box": gr.update(placeholder=said("chat.box_no_model")), "chat_model": self.model_choices()}
        model = self.loaded_models.model
        kinds = [kind for kind in MEDIA_KINDS if kind in model.media_kinds]
        reads = ", ".join(said(f"reads.{kind}") for kind in ["text", *kinds])
        return {"status": said("settings.loaded", model=self.loaded_models.describe(), reads=reads, memory=memory_line()), "message_box": message_box_for(kinds),
                "pdfs_as_images": gr.update(visible="image" in kinds), "chat_model": self.model_choices(), **self.model_defaults(model)}

    def picked_model_defaults(self, model_id: str) -> dict[str, Any]:
        """The generation controls at the defaults of the model a chat picked (empty: the default
        model), as a load shows them; none changed where it is not loaded."""
        model = self._loaded(model_id)
        return {} if model is None else self.model_defaults(model)

    def model_defaults(self, model: ChatModel) -> dict[str, Any]:
        """The generation controls at ``model``'s defaults; the thinking switch off and greyed, its
        reason beside it, where the model's chat template has none (it would do nothing)."""
        defaults = model.generation_defaults
        shown = {name: control_value(defaults, name) for name in self.control_names}
        if "enable_thinking" in shown:
            steers = model.steers_reasoning
            shown["enable_thinking"] = gr.update(value=shown["enable_thinking"] and steers, interactive=steers,
                                                 info=said("setting.enable_thinking.info" if steers else "chat.no_thinking_switch"))
        return shown


def message_box_for(kinds: list[str]) -> dict[str, Any]:
    """Offer uploads of exactly the kinds the model reads, documents (which every model reads, as
    text), and the microphone where the model reads audio. Files that still reach a model that
    cannot read them (attached before a model switch, or sent by an API client) are refused by the
    engine with a clear message."""
    reads = ", ".join(said(f"reads.{kind}") for kind in ["text", *kinds, "documents"])
    return gr.update(
        sources=["upload", "microphone"] if "audio" in kinds else ["upload"],
        file_types=[*kinds, *DOCUMENT_EXTENSIONS],
        placeholder=said("chat.box_reads", reads=reads) + ("" if kinds else said("chat.box_text_only")),
    )


def edited_text(value: Any) -> str:
    """The text of an edited Chatbot message (multipart messages also carry their files), as the
    user wrote it: the edit starts from the text the Chatbot was given, its HTML made inert."""
    if isinstance(value, list):
        value = "".join(part if isinstance(part, str) else part.get("text", "") for part in value
                        if isinstance(part, (str, dict)) and not is_chip(part))
    return as_written(value if isinstance(value, str) else str(value or ""))


def memory_line() -> str:
    return said("settings.memory", gib=f"{psutil.Process().memory_info().rss / 2**30:.2f}")
