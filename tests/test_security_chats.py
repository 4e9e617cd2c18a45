"""Saved chats out of other users' reach, tried the way an attacker tries: raw calls to the
page's endpoints (tests/page_client.py), private listeners included, with another user's chat
id in every field that takes one, against the app of `python app.py --auth alice:… --auth bob:…`
on the real default model (served in the test process: harness/app_in_process.py); and,
without logins, one browser's chats out of another browser's reach."""

import ctypes
import gc
import json
import re
import sqlite3
import threading
import time
import zipfile

import httpx
import openai
import psutil
import pytest

from access.session_owners import NOT_A_SESSION, NOT_YOURS, SessionOwners
from harness.app_in_process import AppInProcess
from store import open_store
from tests.page_client import PageClient, browser_kept, error, file_data, shown
from webui.languages import said
from webui.user_turns import RUNNING, TURNS, WAITING

pytestmark = pytest.mark.server

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
SECRET = "My locker code is 4711."
TEXT_QUOTA = 2**20
CHATS_QUOTA = 20


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    # Quotas small enough that an import fills them in a moment.
    process = AppInProcess(folder, ("--auth", f"alice:{PASSWORDS['alice']}", "--auth", f"bob:{PASSWORDS['bob']}",
                                    "--auth", f"carol:{PASSWORDS['carol']}", "--responses-in-page",
                                    "--max-user-text-size", f"{TEXT_QUOTA}b", "--max-user-chats", str(CHATS_QUOTA)))
    process.database = folder / "data" / "chats.db"  # ANYCHAT_DATA_DIR, as AppInProcess sets it
    yield process
    process.stop()


@pytest.fixture
def tabs(app):
    opened = []

    def tab(user=None):
        client = PageClient(app.url, user, PASSWORDS.get(user), timeout=120)
        opened.append(client)
        return client

    yield tab
    for client in opened:
        client.close()


def opened(tab, storage=None, old=None):
    """Open the tab's page, as its load event does; the chat it shows."""
    opening = tab.call("restore", [storage, old])
    assert error(opening) is None, opening
    return browser_kept(opening)["current"]


def chat_ids(tab, query=""):
    return [chat_id for _, chat_id in tab.call("search_chats", [None, query])["output"]["data"][0]["choices"]]


def rows_of(app, owner: str) -> list[str]:
    """The text of every message of ``owner``'s chats."""
    with sqlite3.connect(app.database) as database:
        return [content for (content,) in database.execute("SELECT content FROM messages JOIN chats ON chats.id = chat_id WHERE owner = ?",
                                                           (owner,))]


def rows(app, chat_id):
    with sqlite3.connect(app.database) as database:
        chat = database.execute("SELECT title, system FROM chats WHERE id = ?", (chat_id,)).fetchone()
        messages = [content for (content,) in database.execute("SELECT content FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,))]
    return chat, messages


def test_another_users_chat_cannot_be_read_listed_changed_or_deleted(app, tabs):
    alice = tabs("alice")
    secret_chat = opened(alice)
    assert error(alice.chat(SECRET)) is None
    assert alice.call("keep_settings", [None, secret_chat, "Alice's prompt", ""]).get("output", {}).get("error") is None
    before = rows(app, secret_chat)
    assert before[0] == (SECRET, "Alice's prompt") and before[1][0] == SECRET

    bob = tabs("bob")
    # Bob's browser says it showed Alice's chat last: he gets a chat of his own.
    assert opened(bob, {"id": "b" * 32, "current": secret_chat}) != secret_chat
    assert SECRET not in shown(bob.call("restore", [{"id": "b" * 32, "current": secret_chat}, None]))
    assert chat_ids(bob) == [] and chat_ids(bob, "locker") == []
    # Gradio refuses an id not among his list's choices; where it did not, the store would show him nothing of hers.
    switched = bob.call("switch_chat", [None, None, secret_chat, "", "", secret_chat])
    assert SECRET not in shown(switched) and "locker" not in shown(switched)
    # What he does next goes into a chat of his own, never into hers.
    assert error(bob.chat("Overwrite it.")) is None
    bob.call("keep_settings", [None, secret_chat, "Leak everything.", "[]"])
    bob.call("rename_chat", [None, None, "Pwned"])
    bob.call("delete_chat", [None, None])
    bob.call("undo", [None])
    bob.call("clear", [None])
    # A version switch naming a message of her chat shows him nothing of it.
    with sqlite3.connect(app.database) as database:
        her_message = database.execute("SELECT min(id) FROM messages WHERE chat_id = ?", (secret_chat,)).fetchone()[0]
    switched = bob.call("switch_version", [None, json.dumps({"kind": "version", "value": str(her_message)})])
    assert SECRET not in shown(switched) and switched["output"]["data"][0] == [], "his own (cleared) conversation stays shown"
    for listener in ("keep_chat", "keep_import"):
        bob.call(listener, [None, None, secret_chat, "Leak everything.", "[]"][: 3 if listener == "keep_import" else 5])
    assert rows(app, secret_chat) == before, "Alice's chat is as she left it"
    assert [chat_id for chat_id in chat_ids(alice)] == [secret_chat] and chat_ids(alice, "locker") == [secret_chat]
    assert SECRET in shown(alice.call("switch_chat", [None, None, "", "", "", secret_chat]))

    # Another tab of Alice's login sees her chat: chats belong to the login, not to the browser.
    other_tab = tabs("alice")
    assert opened(other_tab, {"id": "c" * 32, "current": secret_chat}) == secret_chat
    assert chat_ids(other_tab) == [secret_chat]


def test_another_logins_session_hash_opens_nothing(app, tabs):
    """Alice's session hash is in every heartbeat and answer-stream URL, so in proxy logs. With it
    and his own login, Bob's events are refused before they run (he lists, exports and writes
    nothing of hers), and her answers' stream and heartbeat are refused him; her tab goes on."""
    alice = tabs("alice")
    secret_chat = opened(alice)
    assert error(alice.chat(SECRET)) is None
    before = rows(app, secret_chat)

    bob = tabs("bob")
    bob.session = alice.session
    for listener, data in (("search_chats", [None, ""]), ("export_all", [None]), ("chat", [None, {"text": "Mine now", "files": []}]),
                           ("delete_chat", [None, None])):
        answer = bob.call(listener, data)
        assert answer.get("status") == 400 and answer["detail"] == NOT_YOURS, answer
    for path, params in (("/gradio_api/queue/data", {"session_hash": alice.session}), (f"/gradio_api/heartbeat/{alice.session}", {})):
        refused = bob.http.get(path, params=params)
        assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOURS, refused.text
    # Gradio's cancel route checks no login: neither Bob nor a visitor without one cancels her events.
    cancel = {"session_hash": alice.session, "fn_index": alice.listeners["chat"], "event_id": "0" * 32}
    with httpx.Client(base_url=app.url) as visitor:
        for client in (bob.http, visitor):
            refused = client.post("/gradio_api/cancel", json=cancel)
            assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOURS, refused.text
    assert alice.http.post("/gradio_api/cancel", json=cancel).status_code == 200
    # Gradio's /run runs an event outside the queue: before, Bob stopped her reply and answered her tool approval with it.
    for listener, data in (("stop", [None]), ("settle", [None, json.dumps({"kind": "approval", "value": "once 0000000000000000"})])):
        refused = run_directly(bob, alice, listener, data)
        assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOURS, refused.text
    assert run_directly(alice, alice, "stop", [None]).status_code == 200
    # A component's server function runs on the session's state (none of the page's has one: Gradio answers 404).
    server_function = {"data": None, "component_id": 1, "fn_name": "ls", "session_hash": alice.session}
    refused = bob.http.post("/gradio_api/component_server", json=server_function)
    assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOURS, refused.text
    assert bob.http.post("/gradio_api/component_server", data=server_function, files={"file": ("x", b"x")}).status_code == 400
    assert rows(app, secret_chat) == before
    assert chat_ids(alice, "locker") == [secret_chat]


def run_directly(sender, tab, listener, data, session_hash=None) -> httpx.Response:
    """``sender``'s answer to ``listener``'s event run directly (POST /gradio_api/run/…), in ``tab``'s session unless told."""
    return sender.http.post(f"/gradio_api/run/{listener}", json={"data": data, "fn_index": tab.listeners[listener],
                                                                "session_hash": session_hash or tab.session})


def joined(tab, listener, data, session_hash):
    """``listener``'s event joining the queue under ``session_hash``, its answer not waited for."""
    return tab.http.post("/gradio_api/queue/join", json={"data": data, "event_data": None, "fn_index": tab.listeners[listener],
                                                         "trigger_id": None, "session_hash": session_hash})


def answered_meanwhile(tab, attack) -> float:
    """The seconds ``tab``'s ordinary calls take while ``attack`` runs on a thread; ``attack`` has run to its end after."""
    attacking = threading.Thread(target=attack)
    attacking.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        assert error(tab.call("search_chats", [None, ""])) is None and error(tab.call("list_presets", [None])) is None
        return time.monotonic() - started
    finally:
        attacking.join(300)


def test_a_session_hash_of_no_shape_gradio_makes_is_refused_unread_and_nothing_is_kept_of_it(app, tabs):
    """Before: every hash seen was kept, of any length, on every /gradio_api URL that named one
    and every event that joined: 40 refused joins with 4 MB hashes kept +160 MiB. Now a hash not
    in the shape Gradio's clients make is refused (400) before it is read, and another user is
    answered meanwhile."""
    bob, alice = tabs("bob"), tabs("alice")
    opened(alice)
    huge, long = "a" * 4 * 2**20, "b" * 60_000  # the longest query httpx sends
    refusals = []

    def refused(answer: httpx.Response) -> None:
        # Its status and detail only: the response holds its request, a 4 MB body in this process, the server's.
        refusals.append((answer.status_code, answer.json()["detail"]))

    def attack():
        for _ in range(40):
            refused(joined(bob, "search_chats", [None, ""], huge))
        for path, params in (("/gradio_api/queue/data", {"session_hash": long}), (f"/gradio_api/heartbeat/{long}", {}),
                             ("/gradio_api/deep_link", {"session_hash": long})):
            for _ in range(10):
                refused(bob.http.get(path, params=params))
        refused(run_directly(bob, bob, "stop", [None], session_hash=long))
        refused(bob.http.post("/gradio_api/cancel", json={"session_hash": "../" + "c" * 30, "fn_index": 0, "event_id": "0" * 32}))

    before = kept_memory(app)
    answered = answered_meanwhile(alice, attack)
    after = kept_memory(app)
    print(f"\nalice answered in {answered:.1f} s during the attack; server RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB")
    assert refusals == [(400, NOT_A_SESSION)] * 72
    assert after < before * 1.1
    assert answered < 5, f"another user's calls took {answered:.1f} s during the attack"
    # The check reads an event's body inside the page's body limit.
    too_large = run_directly(bob, bob, "stop", ["x" * 9 * 2**20])
    assert too_large.status_code == 413 and "--max-page-request-size" in too_large.json()["detail"], too_large.text[:300]


def test_a_session_hash_is_recorded_only_for_an_event_a_route_accepted(app, tabs):
    """Before: a hash in any /gradio_api URL, real route or not, and in a refused event, became
    the sender's; here Alice may still open her tab under each."""
    bob = tabs("bob")
    named_in_nothing, refused_event, run_by_no_route = "nothing0route", "refused0event", "no0such0listener"
    assert bob.http.get("/gradio_api/no_such_route", params={"session_hash": named_in_nothing}).status_code == 404
    assert joined(bob, "search_chats", [None], refused_event).status_code == 400  # short of its inputs
    assert bob.http.post("/gradio_api/run/no_such_listener", json={"data": [], "session_hash": run_by_no_route}).status_code != 200
    for session_hash in (named_in_nothing, refused_event, run_by_no_route):
        alice = tabs("alice")
        alice.session = session_hash
        opened(alice)


def test_a_flood_of_made_up_session_hashes_from_one_login_leaves_another_logins_tab_theirs(app, tabs):
    """Before: the owner table forgot the oldest of 100,000 hashes, whoever's: a flood of made-up
    ones pushed out an idle tab's, which could then be claimed. Now each login keeps its own most
    recent hashes: Bob's flood forgets only his own oldest, Alice's idle tab stays hers, and she is
    answered meanwhile."""
    alice, bob = tabs("alice"), tabs("bob")
    opened(alice)
    flood = [f"flood{n:04d}" for n in range(SessionOwners().per_login + 44)]
    statuses = []

    def attack():
        statuses.extend(run_directly(bob, bob, "stop", [None], session_hash).status_code for session_hash in flood)

    before = kept_memory(app)
    answered = answered_meanwhile(alice, attack)
    after = kept_memory(app)
    print(f"\nalice answered in {answered:.1f} s during a flood of {len(flood)} sessions; server RSS {before / 2**20:.0f} -> "
          f"{after / 2**20:.0f} MiB")
    assert statuses == [200] * len(flood)
    assert answered < 5, f"another user's calls took {answered:.1f} s during the flood"
    refused = run_directly(bob, alice, "stop", [None])
    assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOURS, refused.text
    assert error(alice.call("search_chats", [None, ""])) is None, "her tab keeps its state"
    # Bob's oldest hash was forgotten, with its session: whoever presents it starts an empty one. His newest stays his.
    assert run_directly(alice, alice, "stop", [None], session_hash=flood[0]).status_code == 200
    assert run_directly(alice, alice, "stop", [None], session_hash=flood[-1]).status_code == 403
    assert after < before * 1.1


def test_a_queued_event_cannot_be_run_around_the_queue(app, tabs):
    """Before: POST /gradio_api/run/chat ran a reply beside the queue, outside its size limit."""
    bob = tabs("bob")
    opened(bob)
    direct = run_directly(bob, bob, "search_chats", [None, ""])
    assert direct.status_code == 404 and "join the queue" in direct.text, direct.text
    assert error(bob.call("search_chats", [None, ""])) is None, "through the queue it runs"


def test_a_login_past_its_sessions_forgets_its_own_oldest_and_ends_it():
    ended = []
    owners = SessionOwners(per_login=3, end_session=ended.append)
    assert owners.claim("alices0tab", "alice")
    made_up = [f"made0up{n}" for n in range(10)]
    for session_hash in made_up:
        assert owners.claim(session_hash, "bob")
    assert owners.owner_of("alices0tab") == "alice" and not owners.admits("alices0tab", "bob") and not owners.claim("alices0tab", "bob")
    assert ended == made_up[:7]
    assert [owners.owner_of(session_hash) for session_hash in made_up] == [None] * 7 + ["bob"] * 3
    # A hash used again is kept over one used longer ago.
    assert owners.admits("made0up7", "bob") and owners.claim("made0up10", "bob")
    assert ended[-1] == "made0up8" and owners.owner_of("made0up7") == "bob"
    # Without a login nothing is recorded: Gradio refuses the event.
    assert owners.claim("anonymous", None) and owners.owner_of("anonymous") is None


def test_before_the_page_has_opened_every_chat_listener_refuses(app, tabs):
    bob = tabs("bob")
    for listener, data in {"switch_chat": [None, None, "", "", "", None], "new_chat": [None, None, "", "", ""], "delete_chat": [None, None],
                           "rename_chat": [None, None, "x"], "search_chats": [None, ""], "keep_settings": [None, "x", "", ""]}.items():
        assert "has not finished opening: reload it" in (error(bob.call(listener, data)) or ""), listener


def test_without_logins_each_browser_has_its_own_chats(tmp_path_factory):
    app = AppInProcess(tmp_path_factory.mktemp("open"))
    one, two = PageClient(app.url), PageClient(app.url)
    try:
        browser = browser_kept(one.call("restore", [None, None]))["id"]
        first = opened(one, {"id": browser})
        assert error(one.chat(SECRET)) is None
        assert chat_ids(one) == [first]
        assert opened(two, {"id": "f" * 32, "current": first}) != first
        assert chat_ids(two) == [] and SECRET not in shown(two.call("switch_chat", [None, None, "", "", "", first]))
        # The same browser, in another tab (the id its localStorage keeps), has them.
        assert opened(two, {"id": browser, "current": first}) == first and chat_ids(two) == [first]
        # What the browser sends as its id is taken only where it is one.
        for storage in ({"id": "../" * 20}, {"id": 7}, "garbage", [1, 2], {"id": "A" * 32}):
            kept = browser_kept(two.call("restore", [storage, None]))
            assert re.fullmatch("[0-9a-f]{32}", kept["id"]) and kept["id"] != browser and chat_ids(two) == []
    finally:
        one.close()
        two.close()
        app.stop()


def server_memory(app: AppInProcess) -> int:
    """The server's resident memory once what the last requests left is collected."""
    gc.collect()
    return psutil.Process(app.pid).memory_info().rss


def kept_memory(app: AppInProcess) -> int:
    """The server's resident memory less what glibc holds freed: a run of multi-megabyte bodies, read
    and dropped, leaves its heaps about 100 MiB larger (the same after 40 bodies as after 120), which
    would hide whether anything of them is kept."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return psutil.Process(app.pid).memory_info().rss


def test_one_users_flood_of_page_opens_takes_their_turns_only_and_another_user_is_answered(tmp_path_factory):
    """The attack: 40 page opens at once, each moving 100 old browser chats into the store (Gradio
    runs them all at once, on the 40 threads every user's page events share). A user's store
    calls run two at a time and sixteen more wait; the rest are refused in words; another user's
    calls are answered meanwhile within seconds."""
    folder = tmp_path_factory.mktemp("flood")
    app = AppInProcess(folder, ("--auth", f"alice:{PASSWORDS['alice']}", "--auth", f"bob:{PASSWORDS['bob']}"))
    tabs = [PageClient(app.url, "bob", PASSWORDS["bob"], timeout=300) for _ in range(40)]
    alice = PageClient(app.url, "alice", PASSWORDS["alice"])
    try:
        opened(alice)
        old = {"chats": [{"id": str(n), "title": f"Old {n}", "turns": [{"role": "user", "content": f"Hi {n}"}]} for n in range(100)]}
        before = server_memory(app)
        answers = {}
        floods = [threading.Thread(target=lambda tab=tab: answers.update({tab: tab.call("restore", [None, old])})) for tab in tabs]
        for flood in floods:
            flood.start()
        database = folder / "data" / "chats.db"
        deadline = time.monotonic() + 120
        while not database.exists() or sqlite3.connect(database).execute("SELECT count(*) FROM chats WHERE owner = 'login:bob'").fetchone()[0] < 10:
            assert time.monotonic() < deadline, "the flood wrote nothing"
            time.sleep(0.1)
        started = time.monotonic()
        assert error(alice.call("search_chats", [None, ""])) is None and error(alice.call("list_presets", [None])) is None
        answered = time.monotonic() - started
        for flood in floods:
            flood.join(300)
        refused = [answer for answer in answers.values() if error(answer)]
        after = server_memory(app)
        print(f"\nalice answered in {answered:.1f} s; of bob's 40 page opens {40 - len(refused)} ran, {len(refused)} were refused; "
              f"server RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB")
        assert after < before * 1.1
        assert answered < 10, f"another user's calls took {answered:.1f} s during the flood"
        assert refused and {error(answer) for answer in refused} == {said("sidebar.too_many", count=RUNNING + WAITING)}
        assert len(answers) - len(refused) >= RUNNING + WAITING
        assert TURNS._users == {}, "every turn taken was given back"
    finally:
        for tab in [*tabs, alice]:
            tab.close()
        app.stop()


def test_one_users_export_that_hangs_holds_up_no_other_users(app, tabs, monkeypatch):
    """Export all (and a conversation file exported or imported) ran one at a time for all users,
    as Gradio runs a listener by default: one user's export of many files held up everyone's. Now
    another user's export is answered while one user's hangs, and each user's take their turns."""
    import webui.chat_sidebar

    export_chats, entered, held = webui.chat_sidebar.export_chats, threading.Event(), threading.Event()

    def first_one_hangs(*args, **kwargs):
        if not entered.is_set():
            entered.set()
            held.wait(120)
        return export_chats(*args, **kwargs)

    monkeypatch.setattr(webui.chat_sidebar, "export_chats", first_one_hangs)
    bob, alice = tabs("bob"), tabs("alice")
    opened(bob)
    opened(alice)
    bobs = {}
    hanging = threading.Thread(target=lambda: bobs.update(answer=bob.call("export_all", [None])))
    hanging.start()
    try:
        assert entered.wait(60), "bob's export did not start"
        alices = alice.call("export_all", [None])
        assert error(alices) is None and alices["output"]["data"][0]["value"]["path"].endswith(".zip"), alices
        assert not bobs, "alice's export waited for bob's"
    finally:
        held.set()
        hanging.join(120)
    assert error(bobs["answer"]) is None
    assert TURNS._users == {}, "every turn taken was given back"


def test_an_event_short_of_its_inputs_is_refused_in_a_line_not_echoed_back(app, tabs):
    """Gradio's own answer to an event sent with too few values lists every value sent."""
    tab = tabs("bob")
    opened(tab)
    refused = tab.call("search_chats", ["x" * 2**20])
    assert refused["status"] == 400 and len(refused["detail"]) < 200, str(refused)[:500]
    assert refused["detail"] == "This request sends 1 value to an event of the page that takes 2: reload the page."
    assert error(tab.call("search_chats", [None, ""])) is None, "the tab goes on"


def test_another_users_delete_cannot_be_undone(app, tabs):
    alice = tabs("alice")
    opened(alice)
    assert error(alice.chat("Delete me, then bring me back.")) is None
    [chat] = chat_ids(alice, "bring me back")
    assert error(alice.call("delete_chat", [None, None])) is None and chat not in chat_ids(alice)
    bob = tabs("bob")
    opened(bob)
    # His Undo brings back only what his own tab deleted: nothing; the chat id he sends is not read.
    undone = bob.call("undo_delete", [None, None, chat, "", ""])
    assert "bring me back" not in shown(undone) and chat_ids(bob) == [] and chat not in chat_ids(alice)
    assert error(alice.call("undo_delete", [None, None, "", "", ""])) is None and chat in chat_ids(alice)


def test_another_users_preset_cannot_be_read_or_deleted(app, tabs):
    store = open_store(f"sqlite:///{app.database}")
    try:
        store.save_preset("login:alice", "Alice's", "My locker code is 4711.", {"max_new_tokens": 7})
    finally:
        store.close()
    bob = tabs("bob")
    opened(bob)
    assert "Alice's" not in shown(bob.call("list_presets", [None]))
    # Gradio refuses a name not among his list's choices; where it did not, the store would find none of his.
    picked = bob.call("apply_preset", [None, "Alice's"])
    assert error(picked) and "4711" not in shown(picked)
    assert "You have no preset named" in (error(bob.call("delete_preset", [None, "Alice's"])) or "")
    alice = tabs("alice")
    opened(alice)
    assert "Alice's" in shown(alice.call("list_presets", [None]))
    assert "4711" in shown(alice.call("apply_preset", [None, "Alice's"])), "still there, for her"


def test_an_archive_of_chats_imports_into_the_importing_users_chats_only(app, tabs, tmp_path):
    archive = tmp_path / "chats.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("001 Imported.json", json.dumps({"system_prompt": "Be kind.", "turns": [{"role": "user", "content": "Imported hello"}]}))
    bob = tabs("bob")
    opened(bob)
    imported = bob.call("import_all", [None, file_data(bob.upload("chats.zip", archive.read_bytes()))])
    assert error(imported) is None and "Imported 1 chat from chats.zip." in shown(imported)
    assert len(chat_ids(bob, "imported hello")) == 1
    alice = tabs("alice")
    opened(alice)
    assert chat_ids(alice, "imported hello") == []


def archive_of(path, files: dict[str, str]) -> bytes:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as packed:
        for name, content in files.items():
            packed.writestr(name, content)
    return path.read_bytes()


def stored_text(app, owner: str) -> int:
    """The characters of text ``owner``'s chats hold in the database, counted from the rows."""
    with sqlite3.connect(app.database) as database:
        return database.execute("SELECT coalesce(sum(length(content) + length(data)), 0) FROM messages JOIN chats ON chats.id = chat_id "
                                "WHERE owner = ?", (owner,)).fetchone()[0]


def test_a_compressed_import_stops_at_the_users_text_quota_and_another_user_chats_meanwhile(app, tabs, tmp_path):
    """An archive of 1.4 MB of text packed into a few KB (the attack wrote 110 MB from a 103 KB ZIP):
    the import stops at the user's quota with a message that says so, writes nothing past it, and
    a second try writes nothing at all; another user's chat is answered and saved meanwhile."""
    chapter = "All work and no play makes Jack a dull boy. " * 4000  # 180 K characters, each file
    files = {f"{n:03d} Jack.json": json.dumps({"turns": [{"role": "user", "content": f"{n} {chapter}"}]}) for n in range(8)}
    data = archive_of(tmp_path / "jack.zip", files)
    assert len(data) < 50_000
    mallory = tabs("bob")
    opened(mallory)
    upload = file_data(mallory.upload("jack.zip", data))
    alice = tabs("alice")
    opened(alice)
    before = server_memory(app)
    answered = {}

    def alice_chats() -> None:
        time.sleep(0.5)
        started = time.monotonic()
        answered["reply"], answered["seconds"] = alice.chat("Say hello to Jack."), time.monotonic() - started

    thread = threading.Thread(target=alice_chats)
    thread.start()
    try:
        imported = mallory.call("import_all", [None, upload])
    finally:
        thread.join(300)
    assert error(answered["reply"]) is None and answered["seconds"] < 30, answered
    assert "Say hello to Jack." in [content for content in rows_of(app, "login:alice")]
    message = error(imported)
    assert message and re.search(r"Could not import jack\.zip: adding 17\d\.\d KB of text to the [89]\d\d\.\d KB your saved chats and "
                                 r"presets hold would pass this server's limit of 1 MB per user \(--max-user-text-size\).* \(5 imported before that\)", message), message
    kept = stored_text(app, "login:bob")
    assert 5 * len(chapter) < kept <= TEXT_QUOTA
    again = mallory.call("import_all", [None, upload])
    assert "would pass this server's limit of 1 MB per user" in error(again) and "imported before that" not in error(again)
    assert stored_text(app, "login:bob") == kept
    after = server_memory(app)
    print(f"\nserver RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB over the two imports")
    assert after < before * 1.1


def test_an_import_past_the_users_chats_quota_is_refused_before_any_is_read(app, tabs, tmp_path):
    data = archive_of(tmp_path / "many.zip", {f"{n:03d}.json": json.dumps({"turns": [{"role": "user", "content": f"Chat {n}"}]})
                                              for n in range(CHATS_QUOTA + 1)})
    tab = tabs("alice")
    opened(tab)
    before = chat_ids(tab)
    refused = tab.call("import_all", [None, file_data(tab.upload("many.zip", data))])
    assert re.search(rf"Could not import many\.zip: you would have {len(before) + CHATS_QUOTA + 1} saved chats, over this server's limit of "
                     rf"{CHATS_QUOTA} per user \(--max-user-chats\)", error(refused) or ""), refused
    assert chat_ids(tab) == before


def test_a_responses_chain_shows_in_its_logins_page_alone(app, tabs):
    """--responses-in-page: what Carol's API client kept is a chat in her page, which Bob's never lists."""
    client = openai.OpenAI(base_url=f"{app.url}v1", api_key=f"carol:{PASSWORDS['carol']}", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    kept = client.responses.create(model=model, input="Carol's API question", temperature=0, max_output_tokens=4)
    carol, bob = tabs("carol"), tabs("bob")
    opened(carol), opened(bob)
    [chat] = chat_ids(carol)
    switched = carol.call("switch_chat", [None, None, "", "", "", chat])
    assert "Carol's API question" in shown(switched) and kept.output_text in shown(switched)
    assert chat not in chat_ids(bob) and chat_ids(bob, "Carol") == []
