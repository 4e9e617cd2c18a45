"""The chat store itself, on SQLite and on a real PostgreSQL server (a throwaway cluster): its
migrations, one row per message, search, and one owner's chats out of every other's reach."""

import json
import sqlite3
import threading
import time

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from harness.postgres import fresh_database
from store import Added, MessageChanges, MessageTree, NotYours, OverQuota, Quota, StoreError, open_store
from store.database import MIGRATIONS, database_url, migrate


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'chats.db'}"
    return fresh_database(request.getfixturevalue("postgres"))


@pytest.fixture
def chat_store(url):
    store = open_store(url)
    yield store
    store.close()


def messages(*texts, after=None):
    return MessageChanges.line([{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)], after)


def test_the_schema_is_made_by_the_migrations_and_opening_again_changes_nothing(url):
    store = open_store(url)
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0012"
        assert {"chats", "messages", "media", "chat_media", "library_documents", "library_passages", "library_in_chats", "page_preferences",
                "alembic_version"} <= set(inspect(connection).get_table_names())
    store.write("alice", "c1", messages("Hi"), {"title": "Hi"})
    store.close()
    again = open_store(url)
    assert [m.data["content"] for m in again.tree("alice", "c1").messages] == ["Hi"]
    again.close()


def test_two_processes_starting_at_once_migrate_one_after_the_other(url):
    stores, errors = [], []

    def start():
        try:
            stores.append(open_store(url))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(stores) == 3
    stores[0].write("alice", "c1", messages("Hi"), {"title": "Hi"})
    assert [chat.id for chat in stores[2].chats("alice")] == ["c1"], "every store sees the one database"
    for store in stores:
        store.close()


def test_messages_rows_search_and_delete(chat_store):
    ids = chat_store.write("alice", "c1", messages("Name a fruit", "Mango."), {"title": "Name a fruit", "system": "Be brief."})
    chat_store.write("alice", "c2", messages("Hello_world 100%"), {"title": "Greeting"})
    assert [m.id for m in chat_store.tree("alice", "c1").messages] == ids
    chat = chat_store.chat("alice", "c1")
    assert (chat.title, chat.system, chat.tools) == ("Name a fruit", "Be brief.", "")
    # Changed and removed by id (a removed message with the messages after it); another row added meanwhile is left alone.
    [third] = chat_store.write("alice", "c1", messages("Another"), {"title": "x"})
    [fourth] = chat_store.write("alice", "c1", messages("More"), {"title": "x"})
    chat_store.write("alice", "c1", MessageChanges(added=[], follows=[], changed={ids[1]: {"role": "assistant", "content": "Papaya.", "state": "stopped"}},
                                                   removed=[third]), {"title": "x"})
    assert [(m.id, m.data["content"], m.state) for m in chat_store.tree("alice", "c1").messages] == [
        (ids[0], "Name a fruit", "done"), (ids[1], "Papaya.", "stopped"), (fourth, "More", "done")]
    assert chat_store.chat("alice", "c1").title == "Name a fruit", "a chat's title is given once"
    assert [c.id for c in chat_store.chats("alice")] == ["c1", "c2"]
    assert [c.id for c in chat_store.chats("alice", "PAPAYA")] == ["c1"]
    assert [c.id for c in chat_store.chats("alice", "greet")] == ["c2"]
    assert [c.id for c in chat_store.chats("alice", "o_w")] == ["c2"] and chat_store.chats("alice", "o%w") == []
    # A NUL character (PostgreSQL's text holds none) is kept as U+FFFD rather than failing the save.
    chat_store.write("alice", "c3", MessageChanges.line([{"role": "user", "content": "a\0b", "files": ["/tmp/a\0.png"]}]), {"title": "a\0b"})
    assert chat_store.tree("alice", "c3").messages[0].data == {"role": "user", "content": "a\ufffdb", "files": ["/tmp/a\ufffd.png"]}
    assert chat_store.set_settings("alice", "c3", "\0", "\0") and chat_store.chat("alice", "c3").system == "\ufffd"
    assert chat_store.delete("alice", "c1") and chat_store.tree("alice", "c1").messages == []
    assert chat_store.purge(time.time()) == 1
    with chat_store.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM messages WHERE chat_id = 'c1'")).scalar() == 0, "its messages go with it"


def test_a_deleted_chat_is_hidden_until_purged_and_only_its_owner_undoes_the_delete(chat_store):
    chat_store.write("alice", "c1", messages("Keep me", "Kept."), {"title": "Keep me"})
    chat_store.write("alice", "c2", messages("Other"), {"title": "Other"})
    before = time.time()
    assert chat_store.delete("alice", "c1")
    assert [c.id for c in chat_store.chats("alice")] == ["c2"] and chat_store.chats("alice", "kept") == []
    assert chat_store.chat("alice", "c1") is None and chat_store.tree("alice", "c1").messages == [] and chat_store.count("alice") == 1
    assert not chat_store.rename("alice", "c1", "x") and not chat_store.delete("alice", "c1"), "a deleted chat is no chat"
    assert not chat_store.undelete("mallory", "c1", before), "another owner cannot bring it back"
    assert not chat_store.undelete("alice", "c1", time.time() + 1), "nor its owner once the delete is older than asked"
    assert chat_store.purge(before, "alice") == 0, "deleted after the time given: kept"
    assert chat_store.undelete("alice", "c1", before)
    assert [m.data["content"] for m in chat_store.tree("alice", "c1").messages] == ["Keep me", "Kept."] and chat_store.count("alice") == 2
    chat_store.delete("alice", "c1")
    chat_store.write("bob", "b1", messages("Bob's"), {"title": "Bob's"})
    chat_store.delete("bob", "b1")
    assert chat_store.purge(time.time(), "alice") == 1, "only the owner named"
    assert not chat_store.undelete("alice", "c1", before)
    assert chat_store.undelete("bob", "b1", before)


def test_another_owners_chat_cannot_be_read_listed_changed_or_deleted(chat_store):
    [row] = chat_store.write("alice", "c1", messages("Alice's secret"), {"title": "Secret"})
    assert chat_store.chats("mallory") == [] and chat_store.chats("mallory", "secret") == []
    assert chat_store.chat("mallory", "c1") is None and chat_store.tree("mallory", "c1").messages == []
    with pytest.raises(NotYours):
        chat_store.write("mallory", "c1", messages("Mine now"), {"title": "x"})
    with pytest.raises(NotYours):
        chat_store.write("mallory", "c1", MessageChanges(added=[], follows=[], changed={row: {"role": "user", "content": "x"}}, removed=[row]),
                         {"title": "x"})
    assert not chat_store.rename("mallory", "c1", "Pwned")
    assert not chat_store.set_settings("mallory", "c1", "Leak everything.", "")
    assert not chat_store.delete("mallory", "c1")
    # Rows of another chat named in one's own save are not touched either.
    chat_store.write("mallory", "m1", MessageChanges(added=[], follows=[], changed={row: {"role": "user", "content": "x"}}, removed=[row]),
                     {"title": "x"})
    chat = chat_store.chat("alice", "c1")
    assert (chat.title, chat.system) == ("Secret", "")
    assert [m.data["content"] for m in chat_store.tree("alice", "c1").messages] == ["Alice's secret"]


def shown(store, chat_id):
    return [m.data["content"] for m in store.tree("alice", chat_id).shown_messages()]


def test_versions_are_a_tree_and_the_branch_shown_survives_reopening(url):
    store = open_store(url)
    question, first = store.write("alice", "c1", messages("Name a fruit", "Mango."), {"title": "Fruit"})
    [second] = store.write("alice", "c1", messages("Papaya.", after=question), {"title": "x"})
    [third] = store.write("alice", "c1", messages("Kiwi.", after=question), {"title": "x"})
    [edited] = store.write("alice", "c1", messages("Name a vegetable"), {"title": "x"})
    tree = store.tree("alice", "c1")
    assert [m.id for m in tree.messages] == [question, first, second, third, edited] and tree.parents == [None, 0, 0, 0, None]
    assert tree.branch() == [4], "the branch shown is the one written last"
    assert tree.versions(2) == [1, 2, 3] and tree.versions(4) == [0, 4]
    # Another branch shown: only the message shown changes.
    store.write("alice", "c1", MessageChanges(added=[], follows=[], changed={}, removed=[], shown=third), {"title": "x"})
    assert shown(store, "c1") == ["Name a fruit", "Kiwi."]
    # One write adds messages in two branches, naming those it adds before they have ids.
    red, cherry, fig = store.write("alice", "c1", MessageChanges(
        added=[{"role": "user", "content": "And a red one?"}, {"role": "assistant", "content": "Cherry."}, {"role": "assistant", "content": "Fig."}],
        follows=[first, Added(0), Added(0)], changed={}, removed=[], shown=Added(1)), {"title": "x"})
    store.close()
    again = open_store(url)
    tree = again.tree("alice", "c1")
    assert shown(again, "c1") == ["Name a fruit", "Mango.", "And a red one?", "Cherry."] and tree.versions(6) == [6, 7]
    assert [m.id for m in tree.messages[5:]] == [red, cherry, fig]
    # Removing a message removes the messages after it, in every branch; its other versions stay.
    again.write("alice", "c1", MessageChanges(added=[], follows=[], changed={}, removed=[first], shown=question), {"title": "x"})
    assert [m.id for m in again.tree("alice", "c1").messages] == [question, second, third, edited]
    assert again.delete("alice", "c1") and again.tree("alice", "c1").messages == []
    again.close()


def test_a_whole_tree_is_written_at_once_into_a_new_chat_of_its_owner_only(chat_store):
    tree = MessageTree([{"role": "user", "content": "Name a fruit"}, {"role": "assistant", "content": "Mango."},
                        {"role": "assistant", "content": "Kiwi."}, {"role": "user", "content": "Name a vegetable"},
                        {"role": "assistant", "content": "Leek."}], [None, 0, 0, None, 3], shown=2)
    ids = chat_store.write_tree("alice", "c1", tree, {"title": "Fruit"})
    written = chat_store.tree("alice", "c1")
    assert [m.id for m in written.messages] == ids and written.parents == tree.parents and written.shown == 2
    assert shown(chat_store, "c1") == ["Name a fruit", "Kiwi."]
    # Into a chat id already taken, whoever's, or with a message before the one it follows, nothing is written.
    chat_store.write("mallory", "m1", messages("Mine"), {"title": "Mine"})
    with pytest.raises(NotYours):
        chat_store.write_tree("alice", "m1", tree, {"title": "x"})
    with pytest.raises(StoreError, match="exists already"):
        chat_store.write_tree("alice", "c1", tree, {"title": "x"})
    with pytest.raises(ValueError, match="message 0 follows 1"):
        chat_store.write_tree("alice", "c2", MessageTree([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}], [1, None]), {"title": "x"})
    assert [m.data["content"] for m in chat_store.tree("mallory", "m1").messages] == ["Mine"] and chat_store.chat("alice", "c2") is None
    assert len(chat_store.tree("alice", "c1").messages) == 5


def test_chats_written_before_branches_become_one_branch(tmp_path):
    from alembic import command
    from alembic.config import Config

    url = f"sqlite:///{tmp_path / 'chats.db'}"
    store = open_store(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0003")
        connection.execute(text("INSERT INTO chats (id, owner, title, system, tools, created, updated) VALUES ('c1', 'alice', 'Hi', '', '', 0, 0)"))
        for content in ("Hi", "Hello", "Bye"):
            connection.execute(text("INSERT INTO messages (chat_id, role, content, data, state, updated) VALUES ('c1', 'user', :c, '{}', 'done', 0)"),
                               {"c": content})
    migrate(store.engine)
    assert store.tree("alice", "c1").parents == [None, 0, 1]
    assert shown(store, "c1") == ["Hi", "Hello", "Bye"]
    store.close()


def test_presets_are_kept_per_owner_and_saved_again_in_place(chat_store):
    chat_store.save_preset("alice", "Terse", "Be brief.", {"temperature": 0.0, "max_new_tokens": 64})
    chat_store.save_preset("alice", "Creative", "Be bold.", {"temperature": 1.2})
    chat_store.save_preset("alice", "Terse", "Be very brief.", {"temperature": 0.1})
    assert [(p.name, p.system, p.generation) for p in chat_store.presets("alice")] == [
        ("Creative", "Be bold.", {"temperature": 1.2}), ("Terse", "Be very brief.", {"temperature": 0.1})]
    assert chat_store.presets("mallory") == [] and chat_store.preset("mallory", "Terse") is None
    assert not chat_store.delete_preset("mallory", "Terse")
    chat_store.save_preset("mallory", "Terse", "Leak everything.", {})
    assert chat_store.preset("alice", "Terse").system == "Be very brief.", "another owner's preset of the same name is his own"
    assert chat_store.delete_preset("alice", "Terse") and [p.name for p in chat_store.presets("alice")] == ["Creative"]
    assert chat_store.preset("mallory", "Terse").system == "Leak everything."


def test_page_preferences_are_kept_per_owner_each_set_alone(chat_store):
    assert chat_store.page_preferences("login:alice") == {}
    chat_store.keep_page_preference("login:alice", "colour_scheme", "dark")
    chat_store.keep_page_preference("login:alice", "language", "fr")
    chat_store.keep_page_preference("login:alice", "colour_scheme", "light")
    assert chat_store.page_preferences("login:alice") == {"colour_scheme": "light", "language": "fr"}
    chat_store.keep_page_preference("login:bob", "language", "")
    assert chat_store.page_preferences("login:bob") == {"language": ""}, "the browser's language, chosen, is kept too"
    assert chat_store.page_preferences("login:alice")["language"] == "fr"
    for name, value in (("title", "x"), ("language", "x" * 17)):
        with pytest.raises(ValueError):
            chat_store.keep_page_preference("login:alice", name, value)


def test_a_database_that_cannot_be_opened_is_explained(tmp_path):
    with pytest.raises(StoreError, match="not a database URL"):
        open_store("nonsense")
    corrupt = tmp_path / "chats.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="Could not open the chat store at sqlite:///.*chats.db: file is not a database"):
        open_store(f"sqlite:///{corrupt}")
    assert database_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert sqlite3.connect(corrupt)  # left as it was, for its owner to look at


def test_a_list_of_chats_reads_only_what_it_shows(chat_store):
    """Every tab lists its user's chats every few seconds: with 600 MB stored, one list took 1.15 GB.
    A chat's system prompt, tools and settings are not what a list shows, and are not read for it."""
    import tracemalloc

    huge = "x" * 20_000_000
    for number in range(3):
        chat_store.write("alice", f"c{number}", messages(f"Question {number}"), {"title": f"Chat {number}", "system": huge, "tools": huge})
    tracemalloc.start()
    try:
        listed = chat_store.chats("alice")
        searched = chat_store.chats("alice", "question 1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(chat.id, chat.title) for chat in listed] == [("c2", "Chat 2"), ("c1", "Chat 1"), ("c0", "Chat 0")]
    assert [chat.id for chat in searched] == ["c1"]
    assert peak < 2**20, f"listing took {peak / 2**20:.0f} MiB"


def recounted(store, owner: str) -> dict[str, int]:
    """Each of ``owner``'s chats' text counted from scratch, by the migration's own SQL (0006)."""
    with store.engine.connect() as connection:
        return dict(connection.execute(text("""SELECT id,
            coalesce(length(title), 0) + coalesce(length(system), 0) + coalesce(length(tools), 0) + coalesce(length(CAST(generation AS TEXT)), 0)
            + coalesce((SELECT sum(coalesce(length(content), 0) + coalesce(length(CAST(data AS TEXT)), 0)) FROM messages WHERE chat_id = chats.id), 0)
            FROM chats WHERE owner = :owner"""), {"owner": owner}).all())


def counted(store, owner: str) -> dict[str, int]:
    with store.engine.connect() as connection:
        return dict(connection.execute(text("SELECT id, text_size FROM chats WHERE owner = :owner"), {"owner": owner}).all())


def test_each_chats_text_is_counted_as_it_changes(chat_store):
    """The count each write keeps is the chat's text counted from scratch, through every kind of write."""
    ids = chat_store.write("alice", "c1", messages("Name a fruit", "Mango.", "And a colour?", "Blue."), {"title": "Name a fruit", "system": "Be brief."})
    chat_store.write("alice", "c1", MessageChanges(added=[{"role": "assistant", "content": "Papaya, ripe " * 50}], follows=[ids[1]],
                                                   changed={ids[1]: {"role": "assistant", "content": "Kiwi.", "reasoning": "short " * 20}},
                                                   removed=[ids[2]]), {"title": "x"})
    chat_store.set_settings("alice", "c1", "Be very brief, always." * 10, "[]", {"temperature": 0.3})
    chat_store.rename("alice", "c1", "Fruit")
    chat_store.write_tree("alice", "c2", MessageTree([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                                      {"role": "assistant", "content": "Hey " * 100}], [None, 0, 0], shown=2), {"title": "Hi"})
    assert counted(chat_store, "alice") == recounted(chat_store, "alice")
    assert counted(chat_store, "alice")["c1"] > 1000


def test_a_write_past_the_text_quota_is_refused_whole_and_the_room_a_delete_frees_is_used_again(url):
    store = open_store(url, Quota(text=3000))
    try:
        [first] = store.write("alice", "c1", messages("x" * 1000), {"title": "One"})
        before = (store.tree("alice", "c1").messages, counted(store, "alice"))
        with pytest.raises(OverQuota, match=r"adding 2\.4 KB of text to the 1005 bytes your saved chats and presets hold would pass this server's limit of 2\.9 KB per user \(--max-user-text-size\)"):
            store.write("alice", "c1", MessageChanges(added=[{"role": "assistant", "content": "y" * 2500}], follows=[first],
                                                      changed={first: {"role": "user", "content": "z" * 1000}}, removed=[]), {"title": "x"})
        assert (store.tree("alice", "c1").messages, counted(store, "alice")) == before, "nothing of the refused write is kept"
        with pytest.raises(OverQuota):  # a new chat counts with the others
            store.write("alice", "c2", messages("w" * 2500), {"title": "Two"})
        with pytest.raises(OverQuota):  # and so do a chat's system prompt and a preset
            store.set_settings("alice", "c1", "s" * 2500, "")
        with pytest.raises(OverQuota):
            store.save_preset("alice", "Long", "p" * 2500, {})
        assert store.chat("alice", "c2") is None and store.chat("alice", "c1").system == "" and store.presets("alice") == []
        store.write("bob", "b1", messages("v" * 2500), {"title": "Bob's"})  # each user has a quota of their own
        # Over the quota already (a lower one after a restart), a write that shrinks the text goes through.
        shrinking = open_store(url, Quota(text=500))
        shrinking.write("alice", "c1", MessageChanges(added=[], follows=[], changed={first: {"role": "user", "content": "short"}}, removed=[]),
                        {"title": "x"})
        shrinking.close()
        store.write("alice", "c2", messages("w" * 2500), {"title": "Two"})
        assert store.delete("alice", "c2")
        store.write("alice", "c3", messages("u" * 2500), {"title": "Three"})  # a deleted chat's room is free at once
        assert counted(store, "alice") == recounted(store, "alice")
    finally:
        store.close()


def test_a_write_whose_new_media_pass_the_media_quota_is_refused_whole(url):
    """The page leaves out a file past the quota before it saves; the store holds the quota where
    two saves of one user pass that check at once. A file the user's chats keep already counts once."""
    store = open_store(url, Quota(media=5000))
    try:
        store.write("alice", "c1", messages("One"), {"title": "One"}, media={"a" * 64: 3000})
        store.write("alice", "c2", messages("The same file again"), {"title": "Two"}, media={"a" * 64: 3000})
        with pytest.raises(OverQuota, match=r"your saved chats' media would take 5 KB, over this server's limit of 4\.9 KB per user"
                                             r" \(--max-user-media-size\)"):
            store.write("alice", "c1", messages("Another"), {"title": "x"}, media={"b" * 64: 2100})
        assert len(store.tree("alice", "c1").messages) == 1 and store.media_of("alice") == {"a" * 64: 3000}, "nothing of the refused write is kept"
        store.write("bob", "b1", messages("Mine"), {"title": "Bob's"}, media={"b" * 64: 2100})  # each user has a quota of their own
        store.write("alice", "c1", messages("Smaller"), {"title": "x"}, media={"c" * 64: 2000})
        assert store.media_of("alice") == {"a" * 64: 3000, "c" * 64: 2000}
    finally:
        store.close()


def test_chats_and_presets_past_their_quota_are_refused(url):
    store = open_store(url, Quota(chats=2, presets=2))
    try:
        store.write("alice", "c1", messages("One"), {"title": "One"})
        store.write_tree("alice", "c2", MessageTree.line([{"role": "user", "content": "Two"}]), {"title": "Two"})
        with pytest.raises(OverQuota, match=r"you would have 3 saved chats, over this server's limit of 2 per user \(--max-user-chats\)"):
            store.write("alice", "c3", messages("Three"), {"title": "Three"})
        with pytest.raises(OverQuota):
            store.write_tree("alice", "c3", MessageTree.line([{"role": "user", "content": "Three"}]), {"title": "Three"})
        store.write("alice", "c1", messages("More in a chat kept already"), {"title": "x"})
        store.delete("alice", "c1")
        store.write("alice", "c3", messages("Three"), {"title": "Three"})
        assert [chat.id for chat in store.chats("alice")] == ["c3", "c2"]
        store.save_preset("alice", "A", "", {})
        store.save_preset("alice", "B", "", {})
        with pytest.raises(OverQuota, match=r"you would have 3 presets, over this server's limit of 2 per user \(--max-user-presets\)"):
            store.save_preset("alice", "C", "", {})
        store.save_preset("alice", "B", "Saved again in place", {})
        assert [(p.name, p.system) for p in store.presets("alice")] == [("A", ""), ("B", "Saved again in place")]
    finally:
        store.close()


def test_an_upgraded_database_counts_the_text_already_there(tmp_path):
    """Rows written before the count existed (the same rows a store of today writes, copied into
    a database of the schema before it) are counted by the upgrade as the store counts them."""
    from alembic import command
    from alembic.config import Config

    today = open_store(f"sqlite:///{tmp_path / 'today.db'}")
    today.write("alice", "c1", messages("Name a fruit", "Mango é 🥭"), {"title": "Name a fruit", "system": "Be brief."})
    today.set_settings("alice", "c1", "Be brief.", "", {"temperature": 0.5})
    today.save_preset("alice", "Terse", "Answer in one word.", {"top_p": 0.5})
    older = open_store(f"sqlite:///{tmp_path / 'older.db'}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    columns = {"chats": "id, owner, title, system, tools, generation, shown, created, updated, deleted",
               "messages": "id, chat_id, parent, role, content, data, state, updated", "presets": "owner, name, system, generation, updated"}
    with older.engine.begin() as connection, today.engine.connect() as source:
        config.attributes["connection"] = connection
        command.downgrade(config, "0005")
        for table, names in columns.items():
            rows = [row._asdict() for row in source.execute(text(f"SELECT {names} FROM {table}"))]
            connection.execute(text(f"INSERT INTO {table} ({names}) VALUES ({', '.join(':' + name.strip() for name in names.split(','))})"), rows)
    migrate(older.engine)
    assert counted(older, "alice") == counted(today, "alice") == recounted(today, "alice")
    for store in (older, today):
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT text_size FROM presets")).scalar() == len("Answer in one word.") + len('{"top_p": 0.5}')
        store.close()


def test_the_list_stamp_changes_with_every_change_to_the_owners_list_only(chat_store):
    stamps = [chat_store.list_stamp("alice")]

    def changed(what: str) -> None:
        stamps.append(chat_store.list_stamp("alice"))
        assert stamps[-1] != stamps[-2], f"{what}: the stamp did not change"

    [first] = chat_store.write("alice", "c1", messages("Hi"), {"title": "Hi"})
    changed("a chat made")
    chat_store.write("alice", "c1", messages("More"), {"title": "x"})
    changed("a chat written")
    chat_store.rename("alice", "c1", "Ho")  # the same length as before
    changed("a chat renamed")
    chat_store.write("alice", "c2", messages("Other"), {"title": "Other"})
    before = time.time()
    chat_store.delete("alice", "c1")
    changed("a chat deleted")
    chat_store.undelete("alice", "c1", before)
    changed("a delete undone")
    chat_store.set_settings("alice", "c1", "Be brief.", "")
    chat_store.write("bob", "b1", messages("Bob's"), {"title": "Bob's"})
    chat_store.rename("bob", "b1", "Bob")
    assert chat_store.list_stamp("alice") == stamps[-1], "settings and another owner's chats are not alice's list"


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
ASKED = [{"role": "user", "content": "What is the weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
ANSWERED = [{"role": "tool", "tool_call_id": "call_1", "content": "18 C"}, {"role": "assistant", "content": "It is 18 C."}]
ASKED_AGAIN = [{"role": "user", "content": "And tomorrow?"}, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Guess."}]


def keep_chain(store, owner="login:ada", prefix="resp_"):
    """A chain of three replies as the Responses API keeps them (ids ``prefix`` 1, 2, 3): a call, its result answered, a question more."""
    for number, (previous, messages) in enumerate(((None, ASKED), (f"{prefix}1", ANSWERED), (f"{prefix}2", ASKED_AGAIN)), 1):
        store.responses.keep(owner, f"{prefix}{number}", previous, messages, {"id": f"{prefix}{number}", "instructions": "Be brief."})


def shown_messages(store, owner, chat_id):
    tree = store.tree(owner, chat_id)
    return [tree.messages[place].data for place in tree.branch()]


def text_used(store, owner):
    with Session(store.engine) as session:
        return store._text_used(session, owner)


def test_a_responses_chain_shows_in_its_logins_page_as_one_chat_with_its_calls_answered(url, tmp_path):
    store = open_store(url, data=tmp_path, responses_in_page=True)
    keep_chain(store)
    keep_chain(store, "api:127.0.0.1", "resp_api_")  # without a login the replies are an address's, which no page is
    [chat] = store.chats("login:ada")
    assert chat.title == "What is the weather in Paris?" and store.chat("login:ada", chat.id).system == "Be brief."
    call = {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert shown_messages(store, "login:ada", chat.id) == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "It is 18 C.", "steps": [{"tool_calls": [{**call, "result": "18 C"}]}]},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Sunny.", "reasoning": "Guess."}]
    # The call before its result came is the earlier version of the reply that answered it.
    tree = store.tree("login:ada", chat.id)
    assert [tree.messages[place].data for place in tree.versions(tree.branch()[1])][0] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert store.chats("login:bob") == [] and store.chats("api:127.0.0.1") == []
    # Its text counts once, in the chat: the replies it shows are not counted again.
    assert text_used(store, "login:ada") == sum(counted(store, "login:ada").values())
    # Two replies that go on from the same one are two versions in the chat.
    rome = [{"role": "user", "content": "And in Rome?"}, {"role": "assistant", "content": "22 C."}]
    store.responses.keep("login:ada", "resp_4", "resp_2", rome, {})
    assert [m["content"] for m in shown_messages(store, "login:ada", chat.id)] == ["What is the weather in Paris?", "It is 18 C.", "And in Rome?", "22 C."]
    assert len(store.tree("login:ada", chat.id).versions(store.tree("login:ada", chat.id).branch()[2])) == 2

    # Deleted, a reply leaves the chat with what followed it; the chat goes with its first.
    assert store.responses.delete("login:ada", "resp_2")
    assert [m["content"] for m in shown_messages(store, "login:ada", chat.id)] == ["What is the weather in Paris?", ""]
    assert store.responses.delete("login:ada", "resp_1")
    assert store.chats("login:ada") == []
    # The replies that went on from them are still kept (GET finds them), counted again now that no chat shows them.
    assert text_used(store, "login:ada") == len(json.dumps(ASKED_AGAIN)) + len(json.dumps(rome))
    store.close()


def test_a_chain_whose_chat_was_deleted_in_the_page_is_shown_again_in_a_new_chat(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path, responses_in_page=True)
    keep_chain(store)
    [chat] = store.chats("login:ada")
    store.delete("login:ada", chat.id)
    responses = text_used(store, "login:ada")
    assert responses == sum(len(json.dumps(messages)) for messages in (ASKED, ANSWERED, ASKED_AGAIN))  # no chat shows them now
    store.responses.keep("login:ada", "resp_4", "resp_3", [{"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Bye."}], {})
    [again] = store.chats("login:ada")
    assert again.id != chat.id
    assert [m["content"] for m in shown_messages(store, "login:ada", again.id)] == [
        "What is the weather in Paris?", "It is 18 C.", "And tomorrow?", "Sunny.", "Thanks.", "Bye."]
    assert text_used(store, "login:ada") == counted(store, "login:ada")[again.id]
    store.close()


def test_responses_show_in_no_page_unless_the_operator_says_so(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}", data=tmp_path)
    keep_chain(store)
    assert store.chats("login:ada") == [] and store.responses.conversation("login:ada", "resp_3")[-1]["content"] == "Sunny."
    store.close()
