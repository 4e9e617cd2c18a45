"""The user's library in the page: the documents too long for a context that they attached, kept
to answer from their passages (chat/long_documents.py), listed with what each is and takes of
their quota, and deleted with their passages, vectors and index entries. Chats that were answered
from a deleted document keep the passages they were given; later questions no longer search it."""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.events import Dependency

from chat.saved_chats import SavedChats
from limits import size_text

from .by_name import by_name
from .chat_sidebar import opened, store_errors
from .languages import said, text
from .user_turns import in_users_turn


class DocumentLibrary:
    """Built inside the sidebar; ``wire`` once the page's opening exists."""

    def __init__(self) -> None:
        with gr.Accordion(text("documents.title"), open=False, elem_id="document-library") as self.panel:
            self.note = gr.Markdown(text("documents.empty"), elem_id="library-note")
            self.list = gr.Dropdown([], label=text("documents.document"), elem_id="library-list",
                                    info=text("documents.document_info"))
            self.delete_btn = gr.Button(text("documents.delete"), elem_id="delete-document-btn", size="sm")

    def wire(self, opened_page: Dependency, chats: gr.State) -> None:
        """``opened_page``: the page's opening, which settles whose documents they are (``chats``)."""
        private = {"api_visibility": "private", "concurrency_limit": None}
        listed = {"library_list": self.list, "library_note": self.note}
        opened_page.success(inputs=chats, **by_name(in_users_turn(list_documents), listed), **private)
        self.panel.expand(inputs=chats, **by_name(in_users_turn(list_documents), listed), **private)
        self.delete_btn.click(inputs=[chats, self.list], **by_name(in_users_turn(delete_document), listed), **private)


def _listed(chats: SavedChats) -> dict[str, Any]:
    documents = chats.store.library.documents(chats.owner)
    if not documents:
        return {"library_list": gr.update(choices=[], value=None), "library_note": said("documents.empty")}
    total = sum(document.characters for document in documents)
    note = said("documents.listed_one" if len(documents) == 1 else "documents.listed", count=len(documents), size=size_text(total))
    choices = [(f"{document.name} · {document.summary}", document.id) for document in documents]
    return {"library_list": gr.update(choices=choices, value=None), "library_note": note}


@store_errors
def list_documents(chats: SavedChats | None) -> dict[str, Any]:
    return _listed(opened(chats))


@store_errors
def delete_document(chats: SavedChats | None, document_id: str | None) -> dict[str, Any]:
    chats = opened(chats)
    named = {document.id: document.name for document in chats.store.library.documents(chats.owner)}
    if not document_id or not chats.store.library.delete(chats.owner, document_id):
        raise gr.Error(said("documents.pick_one"), print_exception=False)
    gr.Info(said("documents.deleted", name=named[document_id]))
    return _listed(chats)
