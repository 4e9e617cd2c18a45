"""The page's words in English, by where they show. The settings' controls are not here: their
English is where each setting is declared (``page_control`` in engines/), under the keys
``setting.<name>.label``, ``.info`` and ``.placeholder`` (webui/languages/catalog.py).

``{name}`` marks what the page fills in as it runs (only in what handlers write; see catalog.py)."""

CODE = "en"
NAME = "English"

TEXT = {
    # The page's head and tabs
    "page.title": "# anychat\nChat with local models, on any inference backend.",
    "tab.chat": "Chat",
    "tab.settings": "Settings",

    # Chat tab: the conversation, the box and its buttons
    "chat.empty": "**Start a conversation.** Multimodal models also read the images, video or audio you attach.",
    "chat.box": "Message · Enter to send, Shift+Enter for a new line",
    "chat.box_reads": "Message ({reads}) · Enter to send, Shift+Enter for a new line",
    "chat.box_text_only": " · this model reads text only: load a multimodal model for media",
    "chat.box_no_model": "No model is loaded: load one in the Settings tab.",
    # What a model reads, listed in the box and the status line
    "reads.text": "text",
    "reads.image": "images",
    "reads.video": "videos",
    "reads.audio": "audios",
    "reads.documents": "documents",
    "chat.pdfs_as_images": "Send PDFs as page images (for scans, figures, layout)",
    "chat.stop": "■ Stop",
    "chat.regenerate": "↻ Regenerate",
    "chat.continue": "→ Continue",
    "chat.undo": "↶ Undo",
    "chat.clear": "✕ Clear",
    "chat.nothing_to_regenerate": "There is no message to answer again.",
    "chat.nothing_to_continue": "There is no reply to continue: Continue goes on with the text of the last reply (one stopped, or cut "
                                "at max_new_tokens), and a reply that called tools is answered by their results. Send a message instead.",
    "chat.not_editable": "Only the text of a reply (or a summary of earlier messages) can be edited, not its thinking, its tool calls or "
                         "its stats: edit the text under them.",
    "chat.no_such_version": "There is no such version of a message in this chat: reload the page to see the chat as it is now.",
    "chat.busy": "A reply is being written: wait for it, or press Stop (Esc). Your message stays in the box.",
    "chat.busy_changing": "A reply is being written: wait for it, or press Stop (Esc), before you change the conversation.",
    "chat.cut_short": "The reply was cut short: {error}",
    "chat.not_continued": "Could not continue the reply: {error}",

    # Chat tab: the note under the box on its attached documents
    "attachments.as_images": "{name}: sent as page images",
    "attachments.no_model": "📎 {listed}. Load a model to count their tokens.",
    "attachments.document": "{name} ({summary}): {count} tokens",
    "attachments.so_far": " and the conversation so far ({before} tokens)",
    "attachments.to_passages": "📎 {listed}. The attachments ({attached} tokens){so_far} are more than this model's context of {context} tokens: they will be read into passages, and the passages your message is most about sent in their place.",
    "attachments.too_long": "⚠ {listed}. The attachments ({attached} tokens){so_far} are more than this model's context of {context} tokens, so this message cannot be sent: nothing would be left for the reply. Remove an attachment, send only the part you need, start a new chat, or load a model with a longer context.",
    "attachments.with_conversation": "📎 {listed}. With the conversation so far ({before} tokens) the prompt takes {total} of this model's {context} tokens.",
    "attachments.together": "📎 {listed}. Together {attached} of this model's {context} tokens.",

    # Chat tab: the chat's own settings, beside the conversation
    "chat.model": "Model",
    "chat.model_info": "the loaded model this chat asks",
    "chat.default_model": "The default model",
    "chat.default_model_named": "The default model ({model})",
    "chat.system": "System prompt",
    "chat.system_placeholder": "You are a helpful assistant.",
    "chat.no_thinking_switch": "This model's chat template has no thinking switch: there is nothing to turn on or off.",
    "chat.tools": "Tools",
    "chat.function_schemas": "Function schemas (JSON list)",
    "chat.function_schemas_info": "Functions the model may call that you answer yourself",
    "chat.reply_format": "Reply format",
    "chat.conversation_file": "Conversation file",
    "chat.export_json": "Export JSON",
    "chat.export_markdown": "Export Markdown",
    "chat.exported": "Exported",
    "chat.import_json": "Import JSON",
    "chat.export_failed": "Could not export the conversation: {error}",
    "chat.import_failed": "Could not import {name}: {error}",

    # Settings tab
    "settings.backend_options": "Backend options",
    "settings.backend_options_note": "Empty or 0: the backend's default. A backend refuses the options it does not take, and says which backends do.",
    "settings.list_server_models": "↻ List the server's models",
    "settings.server_models": "{count} served there; empty: the first",
    "settings.no_server_address": "Type a server's address into the Model field first, like http://host:8000/v1.",
    "settings.load": "Load",
    "settings.unload": "Unload",
    "settings.generation": "### Generation\nDefaults come from the loaded model's generation config; changes apply to this tab only.",
    "settings.loaded": "✓ {model} Reads {reads}. {memory}",
    "settings.not_loaded": "⚠ **Could not load:** {error}\n\n{model} {memory}",
    "settings.memory": "App memory: {gib} GiB.",
    "settings.models_here": "Models on this machine",
    "settings.rescan": "↻ Rescan",
    "settings.picker_info": "From {sources}. Picking one fills the Model field; ● loaded now.",
    "settings.picker_cache": "the Hugging Face cache and the embedded default",
    "settings.picker_folder": "{folder}/, the Hugging Face cache and the embedded default",
    "settings.picker_models_folder": "the models folder, the Hugging Face cache and the embedded default",
    "settings.picker_add_folder": " (app.py --models-dir DIR adds a folder of your own)",
    "settings.not_admin": "Not an admin",
    "settings.needs_admin": "Model management needs an admin: ask one of this server's admins (those it names with --admin) to load or unload a model.",
    "settings.this_user": "This user",
    "settings.read_only": "🔒 You see what is loaded, read-only. {needs_logins}",
    "settings.read_only_user": "🔒 Signed in as **{user}**: you see what is loaded, read-only. {needs_admin}",
    "settings.a_guest": "a guest",
    "settings.user_not_admin": "{user} may not load or unload models. {needs_admin}",
    "settings.needs_logins": "Model management needs a login: this server has none, and other machines can reach it, so nobody may load or unload "
                             "models from the page. Its operator can start it with --auth-file and name admins with --admin.",

    # Settings tab: the page's language
    "language.label": "Language",
    "language.info": "Kept in this browser; the page reloads in it",
    "language.browser": "The browser's language",

    # Sidebar: saved chats
    "sidebar.chats": "Chats",
    "sidebar.new_chat": "+ New chat",
    "sidebar.search": "Search chats",
    "sidebar.title": "Title",
    "sidebar.title_placeholder": "New chat",
    "sidebar.rename": "Rename",
    "sidebar.delete": "Delete chat",
    "sidebar.undo_delete": "Undo delete",
    "sidebar.export_all": "Export all chats",
    "sidebar.all_chats": "All chats (a conversation file each)",
    "sidebar.import": "Import chats (ZIP)",
    "sidebar.saved_login_none": "No saved chats yet: they are kept on the server as your login's.",
    "sidebar.saved_login_one": "1 chat, kept on the server as your login's.",
    "sidebar.saved_login_many": "{count} chats, kept on the server as your login's.",
    "sidebar.saved_browser_none": "No saved chats yet: they are kept on the server as this browser's.",
    "sidebar.saved_browser_one": "1 chat, kept on the server as this browser's.",
    "sidebar.saved_browser_many": "{count} chats, kept on the server as this browser's.",
    "sidebar.deleted": "Deleted “{title}”: **Undo delete** brings it back within {seconds} s.",
    "sidebar.the_chat": "the chat",
    "sidebar.too_late": "That delete can no longer be undone: a delete is kept for {seconds} s, and only until the next one.",
    "sidebar.imported_one": "Imported 1 chat from {name}.",
    "sidebar.imported": "Imported {count} chats from {name}.",
    "sidebar.importing": "Importing chat {number} of {count}",
    "sidebar.export_failed": "Could not export the chats: {error}",
    "sidebar.export_left_out": "Left out of the export: {reason}",
    "sidebar.import_left_out": "Left out of the import: {member}: {problem}",
    "sidebar.import_failed": "Could not import {name}: {error}",
    "sidebar.import_failed_after": "Could not import {name}: {error} ({count} imported before that)",
    "sidebar.not_opened": "This page has not finished opening: reload it.",
    "sidebar.not_saved": "Not saved: {error}.",
    "sidebar.store_down": "The saved chats cannot be reached now ({problem}). The conversation on screen stays and goes on; try again in a moment.",
    "sidebar.deleted_elsewhere": "This chat was deleted in another tab or on another device. It stays on this page, and what you write "
                                 "next is saved as a new chat.",
    "sidebar.saved_again": "The chat is saved again.",
    "sidebar.not_saved_now": "⚠ This chat is not saved now ({problem}); it is, as soon as the store can be written.",
    "sidebar.media_not_kept": "{name} is not kept with the chat: {problem}. Meanwhile it stays in this conversation only "
                              "as long as the server keeps the page's files.",
    "sidebar.over_quota": "⚠ This chat is not saved: {problem}. It stays on the page and goes on; it is saved as soon as there is room.",
    "sidebar.save_failed": "⚠ This chat could not be saved ({problem}). It stays on the page and goes on; it is saved again as soon "
                           "as the store can be written. Export it (Conversation file) to keep a copy meanwhile.",
    "sidebar.too_many": "You have {count} requests to the saved chats or for conversation files running or waiting already (from "
                        "this tab or others): wait for them to end, then try again.",

    # Sidebar: presets
    "presets.title": "Presets",
    "presets.preset": "Preset",
    "presets.preset_info": "System prompt and generation settings, saved by name",
    "presets.name": "Name",
    "presets.name_placeholder": "Save the current ones as…",
    "presets.save": "Save preset",
    "presets.delete": "Delete preset",
    "presets.needs_name": "A preset needs a name: write one under Name, then Save preset.",
    "presets.name_too_long": "A preset's name takes at most {most} characters; this one has {length}.",
    "presets.not_saved": "The preset was not saved: {error}",
    "presets.saved": "Saved preset “{name}”.",
    "presets.no_such_preset": "You have no preset named “{name}”: pick one from the list.",
    "presets.no_such_to_delete": "You have no preset named “{name}”: pick the one to delete from the list.",
    "presets.deleted": "Deleted preset “{name}”.",

    # Sidebar: the document library
    "documents.title": "Documents",
    "documents.empty": "No documents yet: one longer than the model's context is kept here when you attach it.",
    "documents.listed_one": "1 document, {size} of text in your quota. Each is searched for the passages a question is about, in any of your chats.",
    "documents.listed": "{count} documents, {size} of text in your quota. Each is searched for the passages a question is about, in any of your chats.",
    "documents.document": "Document",
    "documents.document_info": "Documents too long for the context, kept to answer from their passages",
    "documents.delete": "Delete document",
    "documents.pick_one": "Pick the document to delete from the list.",
    "documents.deleted": "Deleted {name}, with its passages. Chats answered from it keep the passages they were given.",
}
