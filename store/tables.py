"""The store's schema: chats, each owned by one user, and their messages, a row each; each user's
documents (their library), split into passages.

A change to these tables goes with a migration in ``migrations/versions`` (``alembic revision``
there, or written by hand like the first): the app upgrades every database it opens.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# SQLite makes an INTEGER PRIMARY KEY its rowid (counted up by itself); BIGINT it would not.
ROW_ID = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class Chat(Base):
    """``owner``: whose chat it is ("login:NAME", or "browser:ID" for a page without logins)."""

    __tablename__ = "chats"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(200))
    system: Mapped[str] = mapped_column(Text, default="")
    tools: Mapped[str] = mapped_column(Text, default="")
    # The settings the chat was last written with, by name: generation, tools run, its model (None: the tab's own).
    generation: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # The last message of the branch the chat shows (None, or a message since deleted: the newest branch).
    shown: Mapped[int | None] = mapped_column(ROW_ID, nullable=True)
    created: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float)
    # When it was deleted, while that can still be undone (None: not deleted); ChatStore.purge
    # removes it for good, its media with it.
    deleted: Mapped[float | None] = mapped_column(Float, nullable=True)
    # When its title was last changed (None: never), which tells other tabs to list it anew.
    renamed: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The characters of text the chat holds, its messages' and its own (store/quota.py).
    text_size: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    __table_args__ = (Index("ix_chats_owner_updated", "owner", "updated"),)


class Message(Base):
    """One message of a chat, in the order written (``id``), after its ``parent`` (the message
    before it in its branch; None for a first message). A regenerated reply or an edited message
    is a new row with the same parent as the one it replaces, which stays as an earlier version.
    ``content`` is its text, apart so
    that search can read it; ``data`` the rest of it as the page keeps it (files, reasoning, tool
    calls, stats, error); ``state`` where its reply stands: writing, done, stopped, length (cut at
    max_new_tokens) or error."""

    __tablename__ = "messages"
    id: Mapped[int] = mapped_column(ROW_ID, primary_key=True, autoincrement=True)
    chat_id: Mapped[str] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    # No foreign key: a message's later ones are deleted with it by the store, and SQLite cannot add one to a table.
    parent: Mapped[int | None] = mapped_column(ROW_ID, nullable=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16), default="done")
    updated: Mapped[float] = mapped_column(Float)

    # AUTOINCREMENT: an id is never given again after its message is deleted (a tab still names it).
    __table_args__ = (Index("ix_messages_chat_id", "chat_id", "id"), {"sqlite_autoincrement": True})


class Media(Base):
    """An image, video or audio kept with the chats, once however many messages use it: its
    file is ``media/<sha256[:2]>/<sha256>`` in the data folder (store/media.py)."""

    __tablename__ = "media"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[float] = mapped_column(Float)


class ChatMedia(Base):
    """Which chats use which media: a medium goes with the last chat that uses it, and each
    owner's media count against their quota once however many chats use them."""

    __tablename__ = "chat_media"
    chat_id: Mapped[str] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"), primary_key=True)
    sha256: Mapped[str] = mapped_column(ForeignKey("media.sha256"), primary_key=True, index=True)


class Preset(Base):
    """A system prompt and generation settings (by setting name) that ``owner`` saved under ``name``."""

    __tablename__ = "presets"
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    system: Mapped[str] = mapped_column(Text)
    generation: Mapped[dict] = mapped_column(JSON)
    updated: Mapped[float] = mapped_column(Float)
    # The characters of text it holds (store/quota.py).
    text_size: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class PagePreferences(Base):
    """How ``owner`` (a login) likes the page: its colour scheme and language, as the page names
    them; None where never chosen. A few bytes a login, not counted in the text quota."""

    __tablename__ = "page_preferences"
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    colour_scheme: Mapped[str | None] = mapped_column(String(16), nullable=True)
    language: Mapped[str | None] = mapped_column(String(16), nullable=True)
    updated: Mapped[float] = mapped_column(Float)


class LibraryDocument(Base):
    """A document ``owner`` attached that was too long for the model's context, kept to answer
    from its passages (store/library.py); ``sha256``: of its text, to find it again when it is
    attached again. ``characters``: its text's, counted in the owner's text quota."""

    __tablename__ = "library_documents"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(300))
    summary: Mapped[str] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(String(64))
    characters: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_library_documents_owner_sha256", "owner", "sha256"),)


class LibraryInChat(Base):
    """A message that holds the whole text of a library document (the one it was attached to): the
    text is then counted once in its owner's quota, in the chat, and not again in the library,
    while the message is in a chat that is not deleted (store/chats.py, _text_used)."""

    __tablename__ = "library_in_chats"
    message_id: Mapped[int] = mapped_column(ROW_ID, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    document_id: Mapped[str] = mapped_column(ForeignKey("library_documents.id", ondelete="CASCADE"), primary_key=True)

    __table_args__ = (Index("ix_library_in_chats_document", "document_id"),)


class LibraryPassage(Base):
    """One passage of a library document, in its order (``ordinal``), with the PDF page it is on
    (None for other formats), the heading it falls under, and its embedding (float32, unit length).
    Full-text search reads ``text`` through the database's own index (SQLite FTS5, PostgreSQL
    tsvector: created by migration 0008)."""

    __tablename__ = "library_passages"
    id: Mapped[int] = mapped_column(ROW_ID, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(ForeignKey("library_documents.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    page: Mapped[int | None] = mapped_column(Integer, nullable=True)
    heading: Mapped[str] = mapped_column(Text, default="")
    text: Mapped[str] = mapped_column(Text)
    vector: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_library_passages_document", "document_id", "ordinal"), {"sqlite_autoincrement": True})


class ApiResponse(Base):
    """A reply of the Responses API (/v1/responses) kept for a later request to go on from
    (``previous``: the one it went on from) and to be read back (store/responses.py). ``messages``:
    what it added to the conversation, its input and its reply, as chat messages; ``response``:
    the response object as the API returned it. ``characters``: counted in the owner's text quota,
    unless its messages are in a chat of theirs (store/responses_in_page.py): the chat counts them."""

    __tablename__ = "api_responses"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    previous: Mapped[str | None] = mapped_column(String(64), nullable=True)
    messages: Mapped[list] = mapped_column(JSON)
    response: Mapped[dict] = mapped_column(JSON)
    characters: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[float] = mapped_column(Float)
    # Where its messages show in the page as a chat's (None: nowhere): the chat, and its first and
    # last message there (its reply; a later response of the chain follows it).
    chat_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    first_message: Mapped[int | None] = mapped_column(ROW_ID, nullable=True)
    last_message: Mapped[int | None] = mapped_column(ROW_ID, nullable=True)

    __table_args__ = (Index("ix_api_responses_owner", "owner"),)
