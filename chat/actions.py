"""What a user does to a tab's chat: send a message, ask for the last reply again or for more of
it, edit a message, take the last exchange back, clear the chat, show another version of a
message, and bring in a conversation from a file.

Each is a plain function of the tab's ChatSession that changes it, or raises Refused with the
Notice that says why not, the conversation left as it was. None of them writes a reply: the
page (webui/handlers.py) then asks for one (chat/reply.py) where the action calls for it, and
draws the conversation."""

from __future__ import annotations

import asyncio

from engines import ChatModel
from limits import Limits

from .conversation_file import Conversation
from .documents import page_images, read_documents, split_files
from .notices import Notice
from .session import ChatSession, save
from .turns import Turn, copied


class Refused(Exception):
    """The action cannot be taken now; ``notice`` says why, and what to do."""

    def __init__(self, notice: Notice) -> None:
        super().__init__(notice.key)
        self.notice = notice


def not_while_answering(session: ChatSession) -> None:
    """Refuse a change of the conversation while a reply is written into it (the reply would
    write into messages taken out, or into a branch no longer shown)."""
    if session.reply.answering:
        raise Refused(Notice("chat.busy_changing"))


def sends_pages(session: ChatSession, model: ChatModel | None) -> bool:
    """Whether PDFs attached in the tab go to ``model`` as page images (the tab asks for it, and the model reads images)."""
    return session.pdfs_as_images and model is not None and "image" in model.media_kinds


async def add_message(session: ChatSession, text: str, files: list[str], model: ChatModel | None, limits: Limits, user: str | None,
                      upload_folder: str) -> None:
    """The user's message, with its ``files``, as the next turn of the branch shown, to be answered
    by ``model``: media as they are, documents read into text, PDFs rendered into ``upload_folder``
    as page images where they go to the model so, all off the event loop. A file that cannot be
    read is a ChatError that names it, the conversation left as it was."""
    media, documents, pdfs = split_files(files, sends_pages(session, model))
    read = await asyncio.to_thread(read_documents, documents, limits, user)
    media += await asyncio.to_thread(page_images, pdfs, upload_folder, limits)
    session.add(Turn(role="user", content=text, files=media, documents=read))


def to_answer_again(session: ChatSession) -> None:
    """Show the message the last reply answers, to be answered again: the replies it had stay,
    as the earlier versions of the new one. Its refusal, if the model could not answer it, goes."""
    tree = session.tree
    while tree.shown is not None and tree.messages[tree.shown].role == "assistant":
        tree.shown = tree.parents[tree.shown]
    if tree.shown is None:
        raise Refused(Notice("chat.nothing_to_regenerate", level="info"))
    tree.messages[tree.shown].error = None


def to_continue(session: ChatSession) -> None:
    """Check that the last reply can be written on: a reply with text, which called no tools (a
    stopped reply, or one cut at max_new_tokens)."""
    last = session.turns[-1] if session.turns else None
    if last is None or last.role != "assistant" or not last.content.strip() or last.tool_calls:
        raise Refused(Notice("chat.nothing_to_continue"))


def edit_message(session: ChatSession, place: int, text: str) -> None:
    """A new version of the user's message at ``place``, with ``text``, to be answered: the
    message edited stays, with its replies, as the version before."""
    tree = session.tree
    turn = tree.messages[place]
    tree.add(turn.model_copy(update={"content": text, "error": None}, deep=True), tree.parents[place])


def edit_reply(session: ChatSession, place: int, edited: Turn | None) -> None:
    """``edited`` as a new version of the reply at ``place`` (its text, or a summary's), the
    conversation after it kept; the model goes on from it at the next message. None: what was
    edited is not the reply's text (its thinking, a tool call, its stats)."""
    if edited is None:
        raise Refused(Notice("chat.not_editable"))
    session.tree.replace_shown(place, place, edited, copied)


def undo(session: ChatSession) -> Turn | None:
    """Take out the last user message and its reply (every version of it); the message taken out,
    to put back in the box (None where there is no message)."""
    not_while_answering(session)
    tree = session.tree
    last_user = next((place for place in reversed(tree.branch()) if tree.messages[place].role == "user"), None)
    if last_user is None:
        return None
    turn = tree.messages[last_user]
    session.remove([last_user])
    return turn


def clear(session: ChatSession) -> None:
    """Take out every message, every version."""
    not_while_answering(session)
    session.remove(place for place, parent in enumerate(session.tree.parents) if parent is None)


def show_version(session: ChatSession, place: int | None) -> None:
    """Show the version of a message at ``place`` and the newest conversation after it; the next
    message continues that branch. Saved at once (the store may be slow: called off the event loop)."""
    not_while_answering(session)
    if place is None or not 0 <= place < len(session.tree):
        raise Refused(Notice("chat.no_such_version"))
    session.tree.show(place)
    save(session)


def take_conversation(session: ChatSession, conversation: Conversation) -> None:
    """Show ``conversation`` (read from a file), every version of its messages, unsaved until the
    page makes it a chat of its own."""
    not_while_answering(session)
    # Not the chat shown before any more: nothing of it may be written over that one's messages.
    session.keeper = None
    session.tree = conversation.tree
