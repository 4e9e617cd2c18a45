"""The page: a Chat tab (webui/chat_tab.py) and a Settings tab (webui/settings_tab.py) over one
shared LoadedModels, with the sidebar of saved chats (webui/chat_sidebar.py)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from chat.session import ChatSession
from engines import LoadedModels
from engines.context_settings import ContextPolicy
from limits import Limits
from store import ChatStore, Quota, open_store
from tools import ToolCatalog

from . import page_preferences
from .chat_presets import ChatPresets
from .chat_sidebar import SIDEBAR_HEAD, ChatSidebar
from .chat_tab import ChatTab
from .colour_scheme import MESSAGE_COLOURS_CSS
from .document_library import DocumentLibrary
from .handlers import ChatHandlers
from .keyboard_reach import KEYBOARD_REACH, KEYBOARD_REACH_CSS
from .languages import PAGE_I18N, text
from .long_paste import LONG_PASTE_ATTACHES
from .model_rights import ModelRights
from .page_bridge import bridge_script
from .python_in_browser import RUN_BUTTONS
from .read_aloud import READ_ALOUD
from .reply_announcer import REPLY_ANNOUNCER
from .settings_tab import SettingsTab
from .shortcuts import SHORTCUTS, SHORTCUTS_CSS
from .tool_approval import CHOICE_CLICK
from .versions import ARROW_CLICK
from .window_sizes import NARROW_SIDEBAR, WINDOW_SIZES_CSS

# System fonts only: the page must not fetch anything from outside this machine.
THEME = gr.themes.Soft(
    primary_hue="indigo",
    neutral_hue="slate",
    font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"],
).set(
    # Soft's own shades fail WCAG AA's 4.5:1 for small text (axe-core, tests/test_page_for_everyone.py):
    # labels in indigo-500 on indigo-100, info lines in slate-400 on white, white on indigo-500.
    body_text_color_subdued="*neutral_600",
    body_text_color_subdued_dark="*neutral_300",
    block_label_text_color="*primary_700",
    block_title_text_color="*primary_700",
    color_accent="*primary_600",
    button_primary_background_fill="*primary_600",
    button_primary_background_fill_hover="*primary_700",
    button_primary_background_fill_hover_dark="*primary_700",
    button_secondary_background_fill_hover_dark="*primary_700",
    checkbox_label_background_fill_selected="*primary_600",
    checkbox_label_background_fill_selected_dark="*primary_700",
)

CSS = """
.gradio-container { max-width: 1280px !important; margin: 0 auto; }
#chatbot { flex-grow: 1; }
#chatbot img { max-height: 180px; width: auto; }
#title h1 { margin: 0.2em 0 0; font-size: 1.6em; }
#title p { margin: 0; color: var(--body-text-color-subdued); }
#model-status { min-height: 2.5em; }
#chat-buttons button { min-width: 0; }
#chatbot .message:has(.reply-stats) { background: none; border: none; box-shadow: none; padding-top: 0; }
.reply-stats { font-size: 0.78em; color: var(--body-text-color-subdued); }
#chatbot .message:has(.versions) { background: none; border: none; box-shadow: none; padding-top: 0; padding-bottom: 0; }
.versions { font-size: 0.85em; color: var(--body-text-color-subdued); user-select: none; }
.version-go { cursor: pointer; padding: 0 0.4em; }
.tool-approval [class*=approve-] { cursor: pointer; text-decoration: underline; padding: 0 0.3em; }
.python-run button { font-size: 0.8em; padding: 0.1em 0.6em; margin: 0.2em 0; border-radius: 4px; cursor: pointer; }
.python-output { font-size: 0.85em; max-height: 20em; overflow: auto; white-space: pre-wrap; }
.python-output.failed { color: var(--error-text-color, #b91c1c); }
.tool-approval .approve-deny { color: var(--error-text-color, #b91c1c); }
.version-end { opacity: 0.3; padding: 0 0.4em; }
.read-aloud { font-size: 0.78em; color: var(--body-text-color-subdued); margin-left: 0.8em; background: none; border: none; cursor: pointer; padding: 0; }
.document-chip summary { cursor: pointer; }
.document-chip pre { max-height: 20em; overflow: auto; white-space: pre-wrap; font-size: 0.85em; }
#attachments-note { font-size: 0.85em; color: var(--body-text-color-subdued); }
#reply-announcer { position: absolute; width: 1px; height: 1px; margin: -1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
:focus-visible { outline: 2px solid var(--color-accent) !important; outline-offset: 2px; }
.dark :focus-visible { outline-color: var(--primary-300) !important; }
.dark [role=tab].selected { color: var(--primary-300); }
"""

# What launch() or gr.mount_gradio_app() need besides the Blocks (the catalog of its words among them).
PAGE_KWARGS = {"theme": THEME, "css": CSS + SHORTCUTS_CSS + KEYBOARD_REACH_CSS + WINDOW_SIZES_CSS + MESSAGE_COLOURS_CSS, "head": SIDEBAR_HEAD, "i18n": PAGE_I18N}

def build_demo(loaded_models: LoadedModels, rights: ModelRights = ModelRights(), limits: Limits = Limits(),
               models_dir: Path | None = None, store: ChatStore | None = None, context_policy: ContextPolicy = "compact",
               catalog: ToolCatalog | None = None) -> gr.Blocks:
    """The page; serve it with ``PAGE_KWARGS``, ``max_file_size=limits.max_upload_size`` and a
    queue of ``limits.max_queue_size``. ``models_dir``: where the model picker looks besides the
    Hugging Face cache; ``store``: where the chats are kept (the data folder's by default);
    ``context_policy``: what a new chat becomes past the model's context; ``catalog``: the tools
    its chats may run, offered in the Tools panel (the app's; without one, the built-in ones)."""
    with gr.Blocks(title="anychat") as demo:
        session = gr.State(ChatSession())
        sidebar = ChatSidebar(store or open_store(quota=Quota.of(limits)), limits)
        gr.Markdown(text("page.title"), elem_id="title")
        with gr.Tabs():
            chat = ChatTab(context_policy)
            settings = SettingsTab(demo, models_dir, rights, lambda: frozenset(model.model_args.model_name_or_path or "" for model in loaded_models.models))
        generation = {**settings.generation, "enable_thinking": chat.enable_thinking}
        handlers = ChatHandlers(loaded_models, tuple(generation), rights, limits, catalog)
        chat.wire(demo, handlers, session, generation)
        # A chat keeps the tools it runs and the model it asks as it keeps its generation settings.
        kept = {**generation, **chat.run_tools, "chat_model": chat.chat_model, "context_policy": chat.context_policy,
                "long_documents": chat.long_documents}
        sidebar.wire(demo, session, chat.chatbot, chat.system, chat.tools, kept, replies=chat.replies, changes=chat.changes, imported=chat.imported)
        with sidebar.panel:
            presets = ChatPresets()
            library = DocumentLibrary()
        presets.wire(sidebar.opened, sidebar.chats, chat.system, generation)
        library.wire(sidebar.opened, sidebar.chats)
        page_preferences.wire(sidebar.opened, sidebar.chats, settings.colour_scheme, settings.language)
        page_bridge = bridge_script({"version": ARROW_CLICK, "approval": CHOICE_CLICK})
        for script in (SHORTCUTS, REPLY_ANNOUNCER, KEYBOARD_REACH, LONG_PASTE_ATTACHES, READ_ALOUD, page_bridge, RUN_BUTTONS, NARROW_SIDEBAR):
            demo.load(None, js=script)
        settings.wire(demo, handlers, rights, chat.message_box, chat.pdfs_as_images, chat.chat_model, generation)
    return demo
