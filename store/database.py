"""Where the store is and how it is opened: an SQLite file in the app's data folder unless a
database URL names another (PostgreSQL through psycopg 3), brought up to the newest schema by
its Alembic migrations each time the app starts."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from pydantic import BaseModel, Field
from sqlalchemy import URL, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from .chats import ChatStore
from .errors import StoreError
from .quota import Quota
from .media import MediaFiles

MIGRATIONS = Path(__file__).parent / "migrations"
DATABASE_FILE = "chats.db"
# Any constant: two app processes starting on one PostgreSQL migrate it one after the other.
MIGRATION_LOCK = 0x616E7963
# How long an SQLite writer waits for another's write lock: a save, and a migration of the schema.
WRITE_WAIT_MS = 10_000
MIGRATION_WAIT_MS = 120_000


class StoreSettings(BaseModel):
    database_url: str | None = Field(None, description="the database the chats are kept in: postgresql://USER:PASS@HOST/NAME "
                                                       "(the process list shows it: prefer the environment variable "
                                                       "ANYCHAT_DATABASE_URL), or sqlite:///PATH")
    responses_in_page: bool = Field(False, description="show each reply of the Responses API a login keeps (/v1/responses, "
                                                       "previous_response_id) in that login's page as a chat, a chain one chat; "
                                                       "DELETE /v1/responses/{id} takes it out again")


def data_dir() -> Path:
    """ANYCHAT_DATA_DIR, else the user's data folder (beside the app's cache: engines/model_files/cache.py).
    Data, not cache: what is here is the users' chats, never to be deleted to make room."""
    root = os.environ.get("ANYCHAT_DATA_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "anychat"
    )
    return Path(root)


def database_url(url: str | None = None) -> str:
    """``url`` (else ANYCHAT_DATABASE_URL) as SQLAlchemy takes it (postgresql:// goes through
    psycopg 3), else the SQLite file in the data folder."""
    url = url or os.environ.get("ANYCHAT_DATABASE_URL")
    if not url:
        return f"sqlite:///{data_dir() / DATABASE_FILE}"
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    return url


def open_store(url: str | None = None, quota: Quota = Quota(), data: Path | None = None, responses_in_page: bool = False) -> ChatStore:
    """The store at ``url`` (see database_url), its schema migrated to the newest, its media in
    the data folder (``data``, else data_dir()), each owner held to ``quota``, the Responses API's
    replies shown as chats where ``responses_in_page`` (StoreSettings); a StoreError that says
    what to do where it cannot be opened."""
    url = database_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"{url!r} is not a database URL: write sqlite:///PATH or postgresql://USER:PASS@HOST/NAME.") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine(parsed, pool_pre_ping=True)
    except ModuleNotFoundError as error:
        raise StoreError(f"The database driver {error.name} is missing: pip install 'psycopg[binary]'.") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_settings)
    try:
        migrate(engine)
    except SQLAlchemyError as error:
        engine.dispose()
        raise StoreError(f"Could not open the chat store at {parsed.render_as_string(hide_password=True)}: {error.orig or error}. "
                         f"{_advice(parsed)}") from None
    return ChatStore(engine, MediaFiles((data or data_dir()) / "media"), quota, responses_in_page)


def _advice(url: URL) -> str:
    if url.get_backend_name() != "sqlite":
        return "Check that the database server is running and that the URL's host, user, password and database name are right."
    if not url.database:
        return "Name an SQLite file: sqlite:///PATH."
    return (f"If the file is damaged, move {url.database} aside (the app then starts an empty store; sqlite3's .recover "
            "may rescue the chats from the old one), or name another file with --database-url. If its folder cannot be "
            "written, make it writable or set ANYCHAT_DATA_DIR.")


def shown_url(url: str | None = None) -> str:
    """Where the store is, as the startup output says it (without a password)."""
    try:
        return make_url(database_url(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return "?"


def migrate(engine: Engine) -> None:
    """Upgrade the schema to the newest migration, one process at a time."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        elif engine.dialect.name == "sqlite":
            # Python's sqlite3 begins no transaction for DDL: this one holds the write lock throughout,
            # so another process's migration holds it as long as that takes, longer than a save may.
            connection.exec_driver_sql(f"PRAGMA busy_timeout={MIGRATION_WAIT_MS}")
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql(f"PRAGMA busy_timeout={WRITE_WAIT_MS}")


def _sqlite_settings(connection, _record) -> None:
    """Deleting a chat deletes its messages; readers never wait on the writer (WAL); a writer
    waits its turn behind another process's rather than failing at once."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    _write_ahead_log(cursor)
    cursor.execute(f"PRAGMA busy_timeout={WRITE_WAIT_MS}")
    cursor.close()


def _write_ahead_log(cursor: sqlite3.Cursor) -> None:
    """WAL mode, which the file keeps once set. Setting it on a new file needs the file to itself,
    and SQLite answers "locked" at once, without its busy wait, while another connection holds it
    (several processes opening a new store at once, one of them migrating it): asked again meanwhile."""
    deadline = time.monotonic() + MIGRATION_WAIT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)
