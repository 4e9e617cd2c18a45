"""The sidebar of saved chats: new chat, the list (search in titles and messages), switch,
rename, delete (with Undo for a while after), export all and import them back. What each does
to the saved chats is the chat core's (chat/saved_chats.py, chat/saved_chat_actions.py); a
handler here calls it and draws what it returns.

The page opens on the chats of whoever opened it (``restore``): their login's, else the
browser's own (an id the browser keeps); chats an older version kept in the browser move into
the store then. Every handler that shows a chat hands the page the same things, by name
(``show``): the tab's ``session``, the ``chatbot``, the chat's ``system`` prompt and ``tools``,
which chat those belong to (``shown``, a hidden field, so that a save started before a switch
still files them under the right chat), the ``chat_list``, the ``title``, the ``note``, the
emptied ``search`` and what the browser keeps (``storage``). Switching away from a chat whose
reply is being written stops that reply: the page drops its last updates (``cancels``), the
session left shows nothing more (``leaves_the_chat``: not the reply's late updates, nor a refresh
ending late), and the partial reply is saved, marked stopped, in the chat it belongs to.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

import gradio as gr
from gradio.events import Dependency
from gradio.utils import get_upload_folder
from sqlalchemy.exc import SQLAlchemyError

from chat import saved_chat_actions
from chat.actions import Refused
from chat.browser_chats import move_in
from chat.chats_export import export_chats
from chat.saved_chats import UNDO_SECONDS, SavedChats
from chat.session import ChatSession
from engines import ChatError
from limits import Limits
from store import ChatStore, OverQuota, StoreError, store_problem

from .browser_storage import browser_memory, browser_storage, old_chats_storage
from .by_name import by_name
from .chat_view import render
from .languages import said, text
from .notices import toast, words
from .user_turns import in_users_turn

# Gradio makes room for an open sidebar from where the page sits when it first draws, before the
# page's own CSS has centred it, and so makes none; the room is made here. In <head> because
# Gradio confines the page's CSS to its container, and the element that takes the room is
# outside it. Narrow screens keep Gradio's own behaviour (the sidebar covers the page).
SIDEBAR_HEAD = """<style>
@media (min-width: 1024px) { .sidebar-parent:has(#chats-sidebar.open) { padding-left: calc(320px + 1rem) !important; } }
</style>"""

# How often an open page looks for what its user's other tabs and devices have written.
LIST_REFRESH_SECONDS = 5.0
# The system prompt and tools are saved as they are typed, and each save writes the whole text (up
# to what a request holds, megabytes): a tab writes them at most once in this many seconds.
SETTINGS_INTERVAL = 2.0


def store_errors(handler: Callable) -> Callable:
    """A sidebar handler whose store failures (a database gone, a full disk) the page shows as a
    message, leaving what it shows as it is."""

    def explained(error: Exception) -> gr.Error:
        if isinstance(error, OverQuota):
            return gr.Error(said("sidebar.not_saved", error=error), print_exception=False)
        return gr.Error(said("sidebar.store_down", problem=store_problem(error)), print_exception=False)

    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return await handler(*args, **kwargs)
            except (SQLAlchemyError, StoreError, OSError) as error:
                raise explained(error) from None
    else:
        @functools.wraps(handler)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except (SQLAlchemyError, StoreError, OSError) as error:
                raise explained(error) from None
    return guarded


# Resolves once the chat view has had no change for a second (at most 15 s): what the page was
# sent before has been applied by then.
WHEN_THE_CHAT_IS_STILL = """async (...inputs) => {
    const chatbot = document.querySelector("#chatbot");
    let changed = Date.now();
    const watcher = new MutationObserver(() => { changed = Date.now(); });
    if (chatbot) watcher.observe(chatbot, {childList: true, subtree: true, characterData: true});
    const started = Date.now();
    while (Date.now() - changed < 1000 && Date.now() - started < 15000) await new Promise(r => setTimeout(r, 100));
    watcher.disconnect();
    return inputs;
}"""


def leaves_the_chat(handler: Callable) -> Callable:
    """A handler that shows another chat in the tab: from its start, the session it leaves is
    ``left`` (shown no more), unless the handler ends without showing another one."""

    @functools.wraps(handler)
    async def marking_left(chats: SavedChats | None, session: ChatSession, *args: Any) -> dict[str, Any]:
        session.left = True
        view: dict[str, Any] = {}
        try:
            view = await handler(chats, session, *args)
            return view
        finally:
            session.left = view.get("session", session) is not session

    return marking_left


class ChatSidebar:
    """Built inside the page's Blocks; ``wire`` once the chat controls exist."""

    def __init__(self, store: ChatStore, limits: Limits) -> None:
        """``limits``: what an export may take (a chat: the most an import takes) and an import."""
        self.store = store
        self.limits = limits
        self.storage = browser_storage()
        self.old_chats = old_chats_storage()
        # The tab's SavedChats, made when the page opens: nothing the page sends can set it.
        self.chats = gr.State(None)
        self.shown = gr.Textbox(visible=False)
        # ``panel``: more (the presets) is built into it later.
        with gr.Sidebar(label=text("sidebar.chats"), elem_id="chats-sidebar") as self.panel:
            self.new_btn = gr.Button(text("sidebar.new_chat"), elem_id="new-chat-btn", variant="primary", size="sm")
            self.search = gr.Textbox(show_label=False, placeholder=text("sidebar.search"), elem_id="chat-search", container=False)
            self.list = gr.Radio([], show_label=False, elem_id="chat-list", container=False)
            self.note = gr.Markdown(elem_id="saved-chats-note")
            self.title = gr.Textbox(label=text("sidebar.title"), placeholder=text("sidebar.title_placeholder"), elem_id="chat-title")
            with gr.Row():
                self.rename_btn = gr.Button(text("sidebar.rename"), elem_id="rename-chat-btn", size="sm")
                self.delete_btn = gr.Button(text("sidebar.delete"), elem_id="delete-chat-btn", variant="stop", size="sm")
            self.undo_btn = gr.Button(text("sidebar.undo_delete"), elem_id="undo-delete-btn", size="sm", visible=False)
            # Hides Undo once the delete can no longer be undone.
            self.undo_timer = gr.Timer(UNDO_SECONDS, active=False)
            self.export_btn = gr.Button(text("sidebar.export_all"), elem_id="export-chats-btn", size="sm")
            self.exported = gr.File(label=text("sidebar.all_chats"), elem_id="exported-chats", visible=False)
            self.refresh = gr.Timer(LIST_REFRESH_SECONDS)
            self.import_btn = gr.UploadButton(text("sidebar.import"), elem_id="import-chats-btn", file_types=[".zip"], size="sm")

    def wire(self, demo: gr.Blocks, session: gr.State, chatbot: gr.Chatbot, system: gr.Textbox, tools: gr.Textbox,
             generation: dict[str, gr.components.Component], replies: list[Dependency], changes: list[Dependency],
             imported: Dependency) -> None:
        """``generation``: the generation settings' controls by setting name, which a chat keeps
        as it was last answered with; ``replies``: the events that write a reply; ``changes``:
        others that change the conversation; ``imported``: a conversation file read into the
        session, kept as a new chat."""
        self.setting_names = tuple(generation)
        view = {"session": session, "chatbot": chatbot, "system": system, "tools": tools, "shown": self.shown, "chat_list": self.list,
                "title": self.title, "note": self.note, "search": self.search, "storage": self.storage, **generation}
        renamed = {"chat_list": self.list, "title": self.title}
        shown = [self.chats, session, self.shown, system, tools]
        # Each touches only its own tab's state: tabs need not wait in line for each other. Those
        # that call the store take their user's turn (webui/user_turns.py), so no user holds them all.
        private = {"api_visibility": "private", "concurrency_limit": None}
        leaving = {"cancels": replies, **private}
        opening = {"chats": self.chats, "old_chats": self.old_chats, **view}
        # Updates of a stopped reply still on their way to a busy browser are applied after the
        # chat switched to (each event's stream is applied on its own): once the chat view has
        # been still for a moment, the chat the tab shows is painted again. (Its progress goes to
        # the hidden field: on the chat, Gradio would show a timer while the page waits.)
        repainted = {"inputs": [session], **by_name(repaint, {"chatbot": chatbot}), "js": WHEN_THE_CHAT_IS_STILL,
                     "show_progress": "hidden", "show_progress_on": self.shown, **private}
        self.opened = demo.load(inputs=[self.storage, self.old_chats], **by_name(in_users_turn(self.restore), opening), **private)
        self.new_btn.click(inputs=shown, **by_name(in_users_turn(new_chat), view), **leaving).then(**repainted)
        self.list.input(inputs=[*shown, self.list], **by_name(in_users_turn(switch_chat), view), trigger_mode="always_last", **leaving).then(**repainted)
        undoing = {"undo": self.undo_btn, "undo_timer": self.undo_timer}
        self.delete_btn.click(inputs=[self.chats, session], **by_name(in_users_turn(delete_chat), {**view, **undoing}), **leaving).then(**repainted)
        self.undo_btn.click(inputs=shown, **by_name(in_users_turn(undo_delete), {**view, **undoing}), **leaving).then(**repainted)
        self.undo_timer.tick(lambda: (gr.update(visible=False), gr.Timer(active=False)), None, [self.undo_btn, self.undo_timer], **private)
        gr.on([self.title.submit, self.rename_btn.click], inputs=[self.chats, session, self.title],
              **by_name(in_users_turn(rename_chat), renamed), **private)
        self.search.change(in_users_turn(search_chats), [self.chats, self.search], self.list, trigger_mode="always_last", **private)
        refreshed = {"chat_list": self.list, "chatbot": chatbot, "shown": self.shown, "title": self.title, "note": self.note}
        self.refresh.tick(inputs=[self.chats, session, self.search], **by_name(refresh, refreshed), show_progress="hidden", **private)
        for event in replies:
            event.success(inputs=shown, inputs_kwargs=generation, **by_name(in_users_turn(keep_chat), {**renamed, "note": self.note}), **private)
        for event in changes:
            event.success(inputs=shown, **by_name(in_users_turn(keep_chat), {**renamed, "note": self.note}), **private)
        # Saved as they are typed (and on leaving the field, which a paste may not be told apart
        # from), every few seconds at most, so a reload keeps them; not on every change: an import
        # changes them for its new chat.
        gr.on([system.input, tools.input, system.blur, tools.blur], keep_settings, [self.chats, self.shown, system, tools], None,
              trigger_mode="always_last", **private)
        imported.success(inputs=[self.chats, session, system], **by_name(in_users_turn(keep_import), view), **private)
        self.export_btn.click(in_users_turn(self.export_all), self.chats, self.exported, **private)
        self.import_btn.upload(inputs=[self.chats, self.import_btn], **by_name(in_users_turn(self.import_all), {"chat_list": self.list, "note": self.note}),
                               **private)

    @store_errors
    def export_all(self, chats: SavedChats | None) -> dict[str, Any]:
        try:
            path, left_out = export_chats(opened(chats), get_upload_folder(), self.limits.max_upload_size, self.limits.max_user_media_size)
        except (OSError, ChatError) as error:
            raise gr.Error(said("sidebar.export_failed", error=error), print_exception=False) from None
        for reason in left_out:
            gr.Warning(said("sidebar.export_left_out", reason=reason))
        return gr.update(value=path, visible=True)

    @store_errors
    def import_all(self, chats: SavedChats | None, path: str, progress: gr.Progress = gr.Progress()) -> dict[str, Any]:
        """Each conversation file of an archive of chats as a new chat, one at a time; the chat shown stays."""
        chats = opened(chats)

        def step(done: int, count: int) -> None:
            progress(done / count, desc=said("sidebar.importing", number=done + 1, count=count))

        try:
            imported = saved_chat_actions.import_archive(chats, path, os.path.basename(path or ""), self.limits, step)
        except Refused as refused:
            raise gr.Error(words(refused.notice), print_exception=False) from None
        return {"chat_list": list_update(chats), "note": words(imported)}

    @store_errors
    def restore(self, stored: Any, old: Any, page_request: gr.Request | None = None) -> dict[str, Any]:
        """The page opens on its user's chats, on the chat it last showed in this browser (else the newest)."""
        browser, current = browser_memory(stored)
        chats = SavedChats(self.store, owner_of(page_request, browser), browser, current, self.setting_names,
                            upload_folder=get_upload_folder(), tell=toast)
        chats.purge_expired()
        moved = move_in(chats, old, self.limits.max_import_chats)
        session = chats.open(chats.current or chats.newest(), chats.upload_folder)
        return {"chats": chats, "old_chats": None if old is not None else gr.skip(), **show(chats, session, " ".join(map(words, moved)))}


def owner_of(page_request: gr.Request | None, browser: str) -> str:
    """Whose chats a page shows: its login's; without logins, its browser's."""
    username = getattr(page_request, "username", None)
    return f"login:{username}" if username else f"browser:{browser}"


def repaint(session: ChatSession) -> dict[str, Any]:
    """The chat the tab shows, once more (unless a reply is being written into it: that paints it)."""
    return {} if session.reply.answering else {"chatbot": render(session.tree)}


def opened(chats: SavedChats | None) -> SavedChats:
    if chats is None:  # only a raw call skips the page's opening
        raise gr.Error(said("sidebar.not_opened"), print_exception=False)
    return chats


@store_errors
@leaves_the_chat
async def new_chat(chats: SavedChats | None, session: ChatSession, shown: str, system: str, tools: str) -> dict[str, Any]:
    chats = opened(chats)
    return await asyncio.to_thread(show, chats, await saved_chat_actions.new_chat(chats, session, shown, system, tools))


@store_errors
@leaves_the_chat
async def switch_chat(chats: SavedChats | None, session: ChatSession, shown: str, system: str, tools: str, chosen: str | None) -> dict[str, Any]:
    chats = opened(chats)
    return await asyncio.to_thread(show, chats, await saved_chat_actions.switch_chat(chats, session, shown, system, tools, chosen or ""))


@store_errors
@leaves_the_chat
async def delete_chat(chats: SavedChats | None, session: ChatSession) -> dict[str, Any]:
    """Delete the chat shown, stopping its reply, and show the newest one left (or a new chat),
    with Undo for a while."""
    chats = opened(chats)
    newest, deleted = await saved_chat_actions.delete_chat(chats, session)
    view = await asyncio.to_thread(show, chats, newest)
    if deleted is None:
        return {**view, "undo": gr.update(visible=False)}
    return {**view, "note": words(deleted), "undo": gr.update(visible=True), "undo_timer": gr.Timer(active=True)}


@store_errors
@leaves_the_chat
async def undo_delete(chats: SavedChats | None, session: ChatSession, shown: str, system: str, tools: str) -> dict[str, Any]:
    """Bring back the chat this tab deleted last, and show it; the chat shown before stays saved."""
    chats = opened(chats)
    undo_hidden = {"undo": gr.update(visible=False), "undo_timer": gr.Timer(active=False)}
    try:
        undone = await saved_chat_actions.undo_delete(chats, session, shown, system, tools)
    except Refused as refused:
        toast(refused.notice)
        return undo_hidden
    return {**await asyncio.to_thread(show, chats, undone), **undo_hidden}


@store_errors
def rename_chat(chats: SavedChats | None, session: ChatSession, title: str) -> dict[str, Any]:
    chats = opened(chats)
    problem = chats.rename(session.chat_id, title)
    chat = chats.find(session.chat_id)
    if problem:
        toast(problem)
    return {"chat_list": list_update(chats), "title": chat.title if chat else ""}


@store_errors
def search_chats(chats: SavedChats | None, query: str) -> dict[str, Any]:
    return list_update(opened(chats), query)


async def refresh(chats: SavedChats | None, session: ChatSession | None, query: str) -> dict[str, Any]:
    """What the user's other tabs and devices have written meanwhile: the list, and the chat shown."""
    updates = {"chat_list": await asyncio.to_thread(refresh_list, chats, query), **await refresh_chat(chats, session)}
    return {name: update for name, update in updates.items() if update != gr.skip()}


async def refresh_chat(chats: SavedChats | None, session: ChatSession | None) -> dict[str, Any]:
    """The chat shown, with what other tabs and devices wrote into it, or kept apart where they
    deleted it (chat/saved_chat_actions.py: written_elsewhere)."""
    if chats is None or session is None:
        return {}
    written = await saved_chat_actions.written_elsewhere(chats, session)
    if written == "deleted":
        return {"shown": session.chat_id, "title": "", "note": said("sidebar.deleted_elsewhere")}
    return {"chatbot": render(session.tree)} if written == "written" else {}


def refresh_list(chats: SavedChats | None, query: str) -> dict[str, Any]:
    """The list with what the user's other tabs and devices have written meanwhile; left as it
    is when nothing changed (read only where the store says something may have), and while the
    store cannot be reached (the page says so elsewhere)."""
    if chats is None:
        return gr.skip()
    try:
        if not chats.list_changed(query):
            return gr.skip()
        choices = chats.choices(query)
    except (SQLAlchemyError, StoreError, OSError):
        return gr.skip()
    return shown_list(chats, choices) if choices != chats.listed else gr.skip()


@store_errors
def keep_chat(chats: SavedChats | None, session: ChatSession, shown: str, system: str, tools: str, **generation: Any) -> dict[str, Any]:
    """After a reply (which brings the ``generation`` settings it was written with) or another change."""
    chats = opened(chats)
    chats.keep(session, shown, system, tools, generation or None)
    if session.left:
        # A reply the tab switched away from can end on its own before the page's cancel of it lands,
        # and then comes here too: the title and note shown now are the other chat's.
        return {"chat_list": list_update(chats)}
    if session.keeper is not None and session.keeper.problem:  # said once already; the sidebar keeps saying it
        return {"note": said("sidebar.not_saved_now", problem=session.keeper.problem)}
    chat = chats.find(session.chat_id)
    return {"chat_list": list_update(chats), "title": chat.title if chat else "", "note": saved_note(chats)}


async def keep_settings(chats: SavedChats | None, shown: str, system: str, tools: str) -> None:
    """The system prompt and tools as typed, at most once per SETTINGS_INTERVAL: each keystroke
    is an event, and while one waits here Gradio keeps only the latest that came meanwhile."""
    if chats is not None:
        await asyncio.sleep(chats.settings_saved + SETTINGS_INTERVAL - time.monotonic())
    await in_users_turn(write_settings)(chats, shown, system, tools)


@store_errors
def write_settings(chats: SavedChats | None, shown: str, system: str, tools: str) -> None:
    chats = opened(chats)
    chats.set_settings(shown, system, tools)
    chats.settings_saved = time.monotonic()


@store_errors
def keep_import(chats: SavedChats | None, session: ChatSession, system: str) -> dict[str, Any]:
    """An imported conversation becomes a chat of its own; the one shown before stays as saved."""
    chats = opened(chats)
    return show(chats, saved_chat_actions.keep_import(chats, session.tree, system))


def show(chats: SavedChats, session: ChatSession, problem: str = "") -> dict[str, Any]:
    """What the page shows of ``session``, the chat ``chats`` now shows."""
    chat = chats.find(session.chat_id)
    system, tools, title, generation = (chat.system, chat.tools, chat.title, chat.generation) if chat else ("", "", "", {})
    return {"session": session, "chatbot": render(session.tree), "system": system, "tools": tools, "shown": session.chat_id,
            "chat_list": list_update(chats), "title": title, "note": problem or saved_note(chats), "search": "", "storage": chats.for_browser(),
            **{name: value for name, value in generation.items() if name in chats.setting_names}}


def list_update(chats: SavedChats, query: str = "") -> dict[str, Any]:
    return shown_list(chats, chats.choices(query))


def shown_list(chats: SavedChats, choices: list[tuple[str, str]]) -> dict[str, Any]:
    chats.listed = choices
    return gr.update(choices=choices, value=chats.current if any(chat_id == chats.current for _, chat_id in choices) else None)


def saved_note(chats: SavedChats) -> str:
    """The line under the list: how many chats are saved, and where (with the login, or in this browser)."""
    count = chats.store.count(chats.owner)
    whose = "login" if chats.owner.startswith("login:") else "browser"
    many = "none" if not count else "one" if count == 1 else "many"
    return said(f"sidebar.saved_{whose}_{many}", count=count)
