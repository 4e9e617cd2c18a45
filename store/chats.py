"""What the page asks of the store. Every call names the owner it acts for, and touches only that
owner's chats: a chat id of someone else's reads as no chat at all, and writing to one is refused
(ids come from the page, and an attacker can send any). Each call is one short transaction,
so two tabs, or two app processes, never overwrite each other's rows.

A deleted chat is only marked deleted at first, and reads as no chat at all: its owner can undo
the delete until it is purged (``purge``), which removes its rows and its media for good."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Select, delete, exists, false, func, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .errors import NotYours, StoreError
from .library import DocumentLibrary
from .responses import ResponseStore
from .responses_in_page import ResponsesInPage
from .media import MediaFiles
from .message_changes import Added, MessageChanges, MessageRef
from .message_tree import MessageTree
from .quota import CHAT_FIELDS_SIZE, MESSAGE_SIZE, PRESET_SIZE, Quota
from .tables import ApiResponse, Chat, ChatMedia, LibraryDocument, LibraryInChat, Media, Message, PagePreferences, Preset


@dataclass(frozen=True)
class ChatInfo:
    id: str
    title: str
    system: str
    tools: str
    updated: float
    generation: dict[str, Any]


@dataclass(frozen=True)
class ListedChat:
    """A chat as a list of chats shows it."""

    id: str
    title: str


@dataclass(frozen=True)
class PresetInfo:
    name: str
    system: str
    generation: dict[str, Any]


@dataclass(frozen=True)
class StoredMessage:
    """``data``: the message as the page keeps it, ``role`` and ``content`` included. Where it
    stands among the chat's messages (what it follows, its versions) is its place in a MessageTree."""

    id: int
    data: dict[str, Any]
    state: str


PAGE_PREFERENCES = ("colour_scheme", "language")
PAGE_PREFERENCE_LENGTH = 16


class ChatStore:
    """``media``: where the media kept with the chats are; ``quota``: what one owner may keep. A
    write that would take its owner past the quota is refused with OverQuota, and none of it is written."""

    def __init__(self, engine: Engine, media: MediaFiles, quota: Quota = Quota(), responses_in_page: bool = False) -> None:
        """``responses_in_page``: each reply of the Responses API kept is shown in its owner's chats too (store/responses_in_page.py)."""
        self.engine = engine
        self.media = media
        self.quota = quota
        self.library = DocumentLibrary(engine, quota, self._text_used)
        self.responses = ResponseStore(engine, quota, self._text_used, ResponsesInPage(self._write), responses_in_page)

    def close(self) -> None:
        self.engine.dispose()

    def chats(self, owner: str, query: str = "") -> list[ListedChat]:
        """``owner``'s chats, newest first; with ``query``, those whose title or any message holds it, whatever its case.
        Only what a list shows is read: every tab lists its user's chats every few seconds, and a
        chat's system prompt, tools and settings can be megabytes each."""
        statement = select(Chat.id, Chat.title).where(Chat.owner == owner, Chat.deleted.is_(None)).order_by(Chat.updated.desc())
        query = query.strip()
        if query:
            in_messages = exists().where(Message.chat_id == Chat.id, Message.content.icontains(query, autoescape=True))
            statement = statement.where(Chat.title.icontains(query, autoescape=True) | in_messages)
        with Session(self.engine) as session:
            return [ListedChat(chat_id, title) for chat_id, title in session.execute(statement)]

    def list_stamp(self, owner: str) -> tuple[Any, ...]:
        """A value that changes whenever ``owner``'s list of chats, or a search of it, may: a chat
        made, written, renamed, deleted, brought back or purged. One row, read in one pass over
        the owner's chats, where the list is every title and a search reads every message."""
        statement = select(func.count(), func.count(Chat.deleted), func.max(Chat.updated), func.max(Chat.renamed),
                           func.max(Chat.deleted)).where(Chat.owner == owner)
        with Session(self.engine) as session:
            return tuple(session.execute(statement).one())

    def chat(self, owner: str, chat_id: str) -> ChatInfo | None:
        with Session(self.engine) as session:
            chat = _owned(session, owner, chat_id)
            return _info(chat) if chat else None

    def tree(self, owner: str, chat_id: str) -> MessageTree[StoredMessage]:
        """All the chat's messages, every version, in the order written (none for a chat that is not ``owner``'s)."""
        with Session(self.engine) as session:
            chat = _owned(session, owner, chat_id)
            return _tree(_rows(session, owner, chat_id), chat.shown if chat else None).map(_stored)

    def write(self, owner: str, chat_id: str, changes: MessageChanges, created: dict[str, str], media: dict[str, int] | None = None) -> list[int]:
        """Write ``changes`` into the chat, made with ``created`` (its title, system and tools) if
        it is new; the ids of the messages added. Rows this save does not name are left as they
        are. ``media``: the hashes and sizes of the media its messages use (kept in MediaFiles first)."""
        with Session(self.engine) as session, session.begin():
            return self._write(session, owner, chat_id, changes, created, media)

    def _write(self, session: Session, owner: str, chat_id: str, changes: MessageChanges, created: dict[str, str],
               media: dict[str, int] | None = None) -> list[int]:
        """``write`` in ``session``, a transaction the caller holds."""
        now = time.time()
        chat = session.get(Chat, chat_id, with_for_update=True)
        if chat is None:
            chat = self._new_chat(session, owner, chat_id, created, now)
        elif chat.owner != owner:
            raise NotYours(f"Chat {chat_id} is not yours.")
        chat.updated = now
        gone = []
        if changes.removed:
            gone = _below(session.execute(select(Message.id, Message.parent).where(Message.chat_id == chat_id).order_by(Message.id)),
                          changes.removed)
        before = _messages_size(session, chat_id, Message.id.in_([*changes.changed, *gone]))
        if gone:
            session.execute(delete(Message).where(Message.chat_id == chat_id, Message.id.in_(gone)))
        for row_id, message in changes.changed.items():
            session.execute(update(Message).where(Message.chat_id == chat_id, Message.id == row_id).values(**_columns(message, now)))
        rows = [Message(chat_id=chat_id, **_columns(message, now)) for message in changes.added]
        session.add_all(rows)
        session.flush()

        def row_id(message: MessageRef) -> int | None:
            return rows[message.index].id if isinstance(message, Added) else message

        for row, follows in zip(rows, changes.follows, strict=True):
            row.parent = row_id(follows)
        chat.shown = row_id(changes.shown)
        session.flush()
        # Rows added get ids above every earlier one (see tables.Message); an IN list of
        # thousands of them would pass SQLite's limit on a statement's parameters.
        added = Message.id >= rows[0].id if rows else false()
        after = _messages_size(session, chat_id, Message.id.in_(list(changes.changed)) | added)
        session.execute(delete(LibraryInChat).where(LibraryInChat.message_id.in_(list(changes.changed))))
        _note_library_texts(session, owner, {**changes.changed, **{row.id: message for row, message in zip(rows, changes.added)}})
        self._grow(session, owner, chat_id, after - before)
        self._use_media(session, owner, chat_id, media or {}, now)
        return [row.id for row in rows]

    def write_tree(self, owner: str, chat_id: str, tree: MessageTree[dict[str, Any]], created: dict[str, str],
                   media: dict[str, int] | None = None) -> list[int]:
        """A new chat of every message of ``tree`` (an imported chat), showing the branch it
        shows. ``created`` and ``media`` as for ``write``. The ids of the messages, in their
        order. A chat id already taken is refused, whoever's it is."""
        now = time.time()
        with Session(self.engine) as session, session.begin():
            chat = session.get(Chat, chat_id)
            if chat is not None:
                raise NotYours(f"Chat {chat_id} is not yours.") if chat.owner != owner else StoreError(f"Chat {chat_id} exists already.")
            chat = self._new_chat(session, owner, chat_id, created, now)
            rows = [Message(chat_id=chat_id, **_columns(message, now)) for message in tree.messages]
            session.add_all(rows)
            session.flush()
            for parent, row in zip(tree.parents, rows):
                row.parent = rows[parent].id if parent is not None else None
            chat.shown = rows[tree.shown].id if tree.shown is not None else None
            session.flush()
            _note_library_texts(session, owner, {row.id: message for row, message in zip(rows, tree.messages)})
            self._grow(session, owner, chat_id, _messages_size(session, chat_id, true()))
            self._use_media(session, owner, chat_id, media or {}, now)
            return [row.id for row in rows]

    def _new_chat(self, session: Session, owner: str, chat_id: str, created: dict[str, str], now: float) -> Chat:
        self.quota.check_chats(self.count(owner, session) + 1)
        chat = Chat(id=chat_id, owner=owner, **{"system": "", "tools": "", **_without_nul(created)}, created=now, updated=now)
        session.add(chat)
        session.flush()
        self._grow(session, owner, chat_id, session.scalar(select(CHAT_FIELDS_SIZE).where(Chat.id == chat_id)))
        return chat

    def _grow(self, session: Session, owner: str, chat_id: str, grown: int) -> None:
        """Count ``grown`` more characters of text in the chat (fewer where it is negative). Where
        it grew, its owner's text is checked against the quota: over it, the whole write is refused."""
        session.execute(update(Chat).where(Chat.id == chat_id).values(text_size=Chat.text_size + grown))
        if grown > 0:
            self.quota.check_text(self._text_used(session, owner), grown)

    def _text_used(self, session: Session, owner: str) -> int:
        """The characters of text ``owner``'s chats (those not deleted), presets, library and kept API
        responses hold. A library document whose whole text a message of their chats holds (the one
        it was attached to), and an API response shown in one of their chats, are counted there
        only: the same text, kept twice, counts once."""
        chats = select(func.coalesce(func.sum(Chat.text_size), 0)).where(Chat.owner == owner, Chat.deleted.is_(None))
        presets = select(func.coalesce(func.sum(Preset.text_size), 0)).where(Preset.owner == owner)
        in_a_chat = (select(LibraryInChat.document_id).join(Message, Message.id == LibraryInChat.message_id).join(Chat, Chat.id == Message.chat_id)
                     .where(LibraryInChat.document_id == LibraryDocument.id, Chat.owner == owner, Chat.deleted.is_(None)).exists())
        library = select(func.coalesce(func.sum(LibraryDocument.characters), 0)).where(LibraryDocument.owner == owner, ~in_a_chat)
        shown = (select(Message.id).join(Chat).where(Message.id == ApiResponse.last_message, Chat.id == ApiResponse.chat_id,
                                                     Chat.owner == owner, Chat.deleted.is_(None)).exists())
        responses = select(func.coalesce(func.sum(ApiResponse.characters), 0)).where(ApiResponse.owner == owner, ~shown)
        return session.scalar(chats) + session.scalar(presets) + session.scalar(library) + session.scalar(responses)

    def _use_media(self, session: Session, owner: str, chat_id: str, media: dict[str, int], now: float) -> None:
        """Note that the chat uses ``media`` (hashes and sizes), each kept once. Where the owner's
        chats keep a file they did not before, their media are checked against the quota: over
        it, the whole write is refused (the page leaves such a file out before it saves; this
        holds where two saves of one user pass that check at once)."""
        if not media:
            return
        owned = select(ChatMedia.sha256).join(Chat).where(Chat.owner == owner, ChatMedia.sha256.in_(list(media)))
        # Only a file new to the owner's chats can take them past the quota.
        checked = self.quota.media is not None and bool(set(media) - set(session.scalars(owned)))
        insert = (postgresql if self.engine.dialect.name == "postgresql" else sqlite).insert
        session.execute(insert(Media).on_conflict_do_nothing(), [{"sha256": h, "size": size, "created": now} for h, size in media.items()])
        session.execute(insert(ChatMedia).on_conflict_do_nothing(), [{"chat_id": chat_id, "sha256": h} for h in media])
        if checked:
            kept = _media_of(owner).subquery()
            self.quota.check_media(session.scalar(select(func.coalesce(func.sum(kept.c.size), 0))))

    def media_of(self, owner: str) -> dict[str, int]:
        """The hashes and sizes of the media ``owner``'s chats keep (each once)."""
        with Session(self.engine) as session:
            return {digest: size for digest, size in session.execute(_media_of(owner))}

    def set_settings(self, owner: str, chat_id: str, system: str, tools: str, generation: dict[str, Any] | None = None) -> bool:
        """The chat's system prompt, tools and (where given) generation settings; false where
        ``owner`` has no such chat (yet)."""
        values = {"system": _without_nul(system), "tools": _without_nul(tools)}
        if generation is not None:
            values["generation"] = _without_nul(generation)
        return self._update(owner, chat_id, **values)

    def rename(self, owner: str, chat_id: str, title: str) -> bool:
        return self._update(owner, chat_id, title=_without_nul(title), renamed=time.time())

    def delete(self, owner: str, chat_id: str) -> bool:
        """Mark the chat deleted: it is gone from every listing, until ``undelete`` or ``purge``."""
        return self._update(owner, chat_id, deleted=time.time())

    def undelete(self, owner: str, chat_id: str, since: float) -> bool:
        """Bring back ``owner``'s chat deleted at ``since`` or later, if it is not purged yet."""
        with Session(self.engine) as session, session.begin():
            statement = update(Chat).where(Chat.owner == owner, Chat.id == chat_id, Chat.deleted >= since).values(deleted=None)
            return session.execute(statement).rowcount > 0

    def purge(self, deleted_before: float, owner: str | None = None) -> int:
        """Remove for good the chats deleted before ``deleted_before`` (only ``owner``'s where
        named): their messages, and the media no other chat uses. How many chats went."""
        statement = delete(Chat).where(Chat.deleted < deleted_before)
        if owner is not None:
            statement = statement.where(Chat.owner == owner)
        with Session(self.engine) as session, session.begin():
            purged = session.execute(statement).rowcount
        if purged:
            self._sweep()
        return purged

    def _sweep(self) -> None:
        with Session(self.engine) as session, session.begin():
            unused = exists().where(ChatMedia.sha256 == Media.sha256)
            gone = list(session.scalars(delete(Media).where(~unused).returning(Media.sha256)))
        self.media.remove(gone)

    def count(self, owner: str, session: Session | None = None) -> int:
        """How many chats ``owner`` has (deleted ones not counted), in ``session`` where given."""
        statement = select(func.count()).select_from(Chat).where(Chat.owner == owner, Chat.deleted.is_(None))
        if session is not None:
            return session.scalar(statement)
        with Session(self.engine) as session:
            return session.scalar(statement)

    def presets(self, owner: str) -> list[PresetInfo]:
        """``owner``'s presets, by name."""
        statement = select(Preset).where(Preset.owner == owner).order_by(Preset.name)
        with Session(self.engine) as session:
            return [PresetInfo(row.name, row.system, row.generation) for row in session.scalars(statement)]

    def preset(self, owner: str, name: str) -> PresetInfo | None:
        with Session(self.engine) as session:
            row = session.get(Preset, (owner, name))
            return PresetInfo(row.name, row.system, row.generation) if row else None

    def save_preset(self, owner: str, name: str, system: str, generation: dict[str, Any]) -> None:
        """Keep ``owner``'s preset ``name``, in place of one so named before (OverQuota where that
        would take ``owner`` past their presets or text)."""
        name = _without_nul(name)
        values = {"owner": owner, "name": name, "system": _without_nul(system), "generation": _without_nul(generation),
                  "updated": time.time()}
        insert = (postgresql if self.engine.dialect.name == "postgresql" else sqlite).insert
        statement = insert(Preset).values(**values)
        statement = statement.on_conflict_do_update(index_elements=["owner", "name"],
                                                    set_={key: statement.excluded[key] for key in ("system", "generation", "updated")})
        this = (Preset.owner == owner, Preset.name == name)
        with Session(self.engine) as session, session.begin():
            before = session.scalar(select(Preset.text_size).where(*this)) or 0
            session.execute(statement)
            session.execute(update(Preset).where(*this).values(text_size=PRESET_SIZE))
            self.quota.check_presets(session.scalar(select(func.count()).select_from(Preset).where(Preset.owner == owner)))
            grown = session.scalar(select(Preset.text_size).where(*this)) - before
            if grown > 0:
                self.quota.check_text(self._text_used(session, owner), grown)

    def delete_preset(self, owner: str, name: str) -> bool:
        with Session(self.engine) as session, session.begin():
            return session.execute(delete(Preset).where(Preset.owner == owner, Preset.name == name)).rowcount > 0

    def page_preferences(self, owner: str) -> dict[str, str]:
        """``owner``'s chosen colour scheme and language (PAGE_PREFERENCES), those never chosen left out."""
        with Session(self.engine) as session:
            row = session.get(PagePreferences, owner)
            return {name: getattr(row, name) for name in PAGE_PREFERENCES if row is not None and getattr(row, name) is not None}

    def keep_page_preference(self, owner: str, name: str, value: str) -> None:
        """Keep ``owner``'s ``name`` (one of PAGE_PREFERENCES) as ``value``, a name of the page's
        (ValueError for another setting, or a value longer than any such name)."""
        if name not in PAGE_PREFERENCES or len(value) > PAGE_PREFERENCE_LENGTH:
            raise ValueError(f"{name!r} = {value[:40]!r} is no page preference")
        insert = (postgresql if self.engine.dialect.name == "postgresql" else sqlite).insert
        statement = insert(PagePreferences).values(owner=owner, updated=time.time(), **{name: value})
        statement = statement.on_conflict_do_update(index_elements=["owner"], set_={name: value, "updated": statement.excluded.updated})
        with Session(self.engine) as session, session.begin():
            session.execute(statement)

    def _update(self, owner: str, chat_id: str, **values: Any) -> bool:
        """Set ``values`` in ``owner``'s chat (not deleted), its text counted anew; false where there is no such chat."""
        this = (Chat.owner == owner, Chat.id == chat_id, Chat.deleted.is_(None))
        with Session(self.engine) as session, session.begin():
            before = session.scalar(select(CHAT_FIELDS_SIZE).where(*this))
            if before is None:
                return False
            session.execute(update(Chat).where(*this).values(**values))
            self._grow(session, owner, chat_id, session.scalar(select(CHAT_FIELDS_SIZE).where(Chat.id == chat_id)) - before)
            return True


def _tree(rows: Any, shown: int | None = None) -> MessageTree[Any]:
    """A chat's rows (each with an ``id`` and ``parent``, at least), by id, as the tree they
    make; ``shown``: the id of the last message the chat shows."""
    return MessageTree.of_rows(rows, lambda row: row.id, lambda row: row.parent, shown)


def _below(rows: Any, ids: list[int]) -> list[int]:
    """``ids`` (those among a chat's ``rows``) and the ids of every message after them."""
    tree = _tree(rows)
    place = {row.id: index for index, row in enumerate(tree.messages)}
    return [tree.messages[below].id for below in tree.below(place[i] for i in ids if i in place)]


def _rows(session: Session, owner: str, chat_id: str) -> list[Message]:
    statement = (select(Message).join(Chat).where(Chat.owner == owner, Chat.deleted.is_(None), Message.chat_id == chat_id)
                 .order_by(Message.id))
    return list(session.scalars(statement))


def _stored(row: Message) -> StoredMessage:
    return StoredMessage(row.id, {**row.data, "role": row.role, "content": row.content}, row.state)


def _media_of(owner: str) -> Select:
    """The hashes and sizes of the media ``owner``'s chats keep, each once."""
    return select(Media.sha256, Media.size).join(ChatMedia).join(Chat).where(Chat.owner == owner).distinct()


def _note_library_texts(session: Session, owner: str, written: dict[int, dict[str, Any]]) -> None:
    """Note which of the messages ``written`` (by row id) hold the whole text of one of ``owner``'s
    library documents: the page keeps a document it answered from passages with its text and
    ``library_id`` in the message it was attached to; a later message that searched it again has
    its id and no text. Only the owner's own documents are noted (an imported chat may name any id).
    A message changed is noted anew: the caller removes what was noted of it before."""
    holds = {row_id: {document["library_id"] for document in message.get("documents") or ()
                      if isinstance(document, dict) and document.get("library_id") and document.get("text")}
             for row_id, message in written.items()}
    named = set().union(*holds.values())
    owned = set(session.scalars(select(LibraryDocument.id).where(LibraryDocument.owner == owner, LibraryDocument.id.in_(named)))) if named else set()
    noted = [{"message_id": row_id, "document_id": document_id} for row_id, ids in holds.items() for document_id in ids & owned]
    if noted:
        session.execute(LibraryInChat.__table__.insert(), noted)


def _messages_size(session: Session, chat_id: str, which: Any) -> int:
    """The characters of text of the chat's messages ``which`` selects (a condition on Message)."""
    return session.scalar(select(func.coalesce(func.sum(MESSAGE_SIZE), 0)).where(Message.chat_id == chat_id, which))


def _owned(session: Session, owner: str, chat_id: str) -> Chat | None:
    chat = session.get(Chat, chat_id)
    return chat if chat is not None and chat.owner == owner and chat.deleted is None else None


def _info(chat: Chat) -> ChatInfo:
    return ChatInfo(chat.id, chat.title, chat.system, chat.tools, chat.updated, chat.generation or {})


def _columns(message: dict[str, Any], now: float) -> dict[str, Any]:
    data = _without_nul(message)
    return {"role": data.pop("role"), "content": data.pop("content", ""), "state": data.pop("state", "done"), "data": data, "updated": now}


def _without_nul(value: Any) -> Any:
    """``value`` with each NUL character as U+FFFD: PostgreSQL's text cannot hold one, and a
    message may have one (the page's endpoints take anything)."""
    if isinstance(value, str):
        return value.replace("\0", "\ufffd")
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value
