"""Files and request bodies through the page's own endpoints, sent the way an attacker sends them
(raw HTTP to the page's queue, to every listener that takes a file, private ones included),
against `python app.py --auth alice:… --auth bob:… --admin alice` on the real default model,
as bob: server paths named as uploads (a file outside the upload folder, /etc/passwd, a FIFO, a
device, a huge sparse file), bodies of hundreds of megabytes, an export of one upload named 200
times, files kept past their lifetime, NUL bytes in paths, and the paths the model picker shows;
and, in Chromium, what the page says when a message is over the page's request limit. The app
whose memory is measured is a process of its own; the one with small limits for the page's files
is served in the test process (harness/app_in_process.py).
"""

import io
import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import psutil
import pytest
from PIL import Image

from engines.model_files.paths import default_gguf
from harness.app_in_process import AppInProcess
from harness.browser import ROOT, AppProcess, open_chat
from tests.page_client import GREEDY, NO_TOOLS, PageClient, error, file_data, shown

pytestmark = [pytest.mark.browser, pytest.mark.server]

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
# Gradio's words for a file a request names that no user uploaded.
NOT_UPLOADED = ("was not uploaded by a user", "is not in the cache folder")
MB = 2**20


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """Files on the server outside every folder the page keeps files in."""
    folder = tmp_path_factory.mktemp("outside")
    picture = folder / "secret.png"
    Image.new("RGB", (8, 8), "red").save(picture)
    fifo = folder / "pipe.png"
    os.mkfifo(fifo)
    huge = folder / "huge.png"
    with open(huge, "wb") as file:
        file.truncate(4 * 2**30)  # sparse: 4 GB that take no disk
    # The huge file last: a server that copied what it is sent would fill the disk with it (and a
    # FIFO, which blocks the reader, stops such a server before).
    return {"an image outside the upload folder": str(picture), "/etc/passwd": "/etc/passwd", "a FIFO": str(fifo),
            "a device": "/dev/zero", "a 4 GB sparse file": str(huge)}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    (folder / "media").mkdir()
    (folder / "models").mkdir()
    (folder / "models" / "copy.gguf").symlink_to(default_gguf())
    process = AppProcess(folder, ("--backend", "huggingface", "--auth", f"alice:{PASSWORDS['alice']}", "--auth", f"bob:{PASSWORDS['bob']}",
                                  "--admin", "alice", "--max-upload-size", "4mb", "--models-dir", str(folder / "models"),
                                  "--allowed-local-media-path", str(folder / "media")))
    process.files = folder / "gradio"  # GRADIO_TEMP_DIR, as AppProcess sets it
    yield process
    process.stop()


@pytest.fixture
def tabs(app):
    """Browser tabs of the app's users, opened by hand; closed whatever happens."""
    opened = []

    def tab(user):
        opened.append(PageClient(app.url, user, PASSWORDS[user], timeout=60))
        return opened[-1]

    yield tab
    for client in opened:
        client.close()


def files_kept(app) -> list[Path]:
    return sorted(path for path in app.files.rglob("*") if path.is_file())


def png(side: int = 8) -> bytes:
    """A PNG of noise (which does not compress): about 3 bytes a pixel."""
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, format="PNG")
    return out.getvalue()


def answered(message) -> bool:
    """A chat call that ended with the model's reply: its stats line comes last."""
    return error(message) is None and "reply-stats" in json.dumps(message["output"]["data"][0][-1])


class Meanwhile:
    """``attack`` run on a thread while the test goes on; ``join`` says how long it took."""

    def __init__(self, attack) -> None:
        self.failure, self.started = None, time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(attack,), daemon=True)
        self.thread.start()

    def _run(self, attack) -> None:
        try:
            attack()
        except Exception as failure:  # noqa: BLE001  (handed to the test, which fails with it)
            self.failure = failure

    def join(self, timeout: float) -> float:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the attack still runs after {timeout} s: the server is stuck"
        if self.failure:
            raise self.failure
        return time.monotonic() - self.started


# Every listener that takes a file, and how a request to it names one. (Gradio looks for files
# in any input's value, so one ordinary input stands for all the others.)
LISTENERS = {
    "the message box (/chat)": lambda path: ("chat", [None, {"text": "Look.", "files": [file_data(path)]}, "", "", "text", "", "", "compact", "auto",
                                                     *NO_TOOLS.values(), *GREEDY.values()], None),
    "any other input (/chat's system prompt)": lambda path: ("chat", [None, {"text": "Hi", "files": []}, file_data(path), "", "text", "", "",
                                                                     "compact", "auto", *NO_TOOLS.values(), *GREEDY.values()], None),
    "the conversation file (/import_conversation)": lambda path: ("import_conversation", [None, file_data(path)], None),
    "the archive of chats (import_all)": lambda path: ("import_all", [None, file_data(path)], None),
    "the saved chats (restore)": lambda path: ("restore", [{"id": file_data(path)}, {"current": "", "chats": [], "pasted": file_data(path)}], None),
    "an edited message (edit)": lambda path: ("edit", [None, "", "", "text", "", "", "compact", "auto", *NO_TOOLS.values(), *GREEDY.values()],
                                              {"index": 0, "value": [file_data(path), "Look."]}),
}


def test_server_files_named_in_a_request_are_refused_by_every_listener(app, outside, tabs):
    bob, alice = tabs("bob"), tabs("alice")
    assert answered(bob.chat("Say hello."))
    before = files_kept(app)
    refusals = {}

    def attack():
        for listener, request in LISTENERS.items():
            for what, path in outside.items():
                started = time.monotonic()
                refusals[listener, what] = error(bob.call(*request(path))), time.monotonic() - started

    attack = Meanwhile(attack)
    assert answered(alice.chat("Say hi.")), "another user is answered while the attack runs"
    attack.join(timeout=120)
    for (listener, what), (message, seconds) in refusals.items():
        assert message and any(words in message for words in NOT_UPLOADED), f"{what} through {listener}: {message}"
        assert seconds < 10, f"{what} through {listener} took {seconds:.1f} s"
    assert files_kept(app) == before, "nothing is copied among the page's files"
    for path in outside.values():
        assert bob.http.get(f"/gradio_api/file={path}").status_code == 403
    # The conversation is as it was: the next message goes on from it.
    reply = bob.chat("Say bye.")
    assert answered(reply) and "Say hello." in shown(reply)


def test_the_file_route_serves_the_pages_files_only(app, tabs):
    bob = tabs("bob")
    picture = png()
    mine = bob.upload("mine.png", picture)
    assert bob.http.get(f"/gradio_api/file={mine}").content == picture
    for path in ("app.py", str(ROOT / "app.py"), "README.md", "/etc/passwd", str(app.files), str(app.log_path), f"{app.files}/../app.log",
                 "\0", f"{mine}\0"):
        assert bob.http.get("/gradio_api/file=" + quote(path)).status_code == 403, path


def test_page_request_bodies_are_bounded(app, tabs):
    bob, alice = tabs("bob"), tabs("alice")
    server = psutil.Process(app.process.pid)
    before = server.memory_info().rss
    limit = "over this server's limit of 8 MB (set with --max-page-request-size)"

    refused = bob.chat("x" * 9 * MB)
    assert refused["status"] == 413 and limit in refused["detail"], refused
    blob = {"current": "a", "chats": [{"id": "a", "title": "t", "turns": [{"role": "user", "content": "x" * 9 * MB}]}]}
    refused = bob.call("restore", [None, blob])
    assert refused["status"] == 413 and limit in refused["detail"], refused

    def stream():
        """300 MB sent in chunks, without a length: counted as it arrives."""
        for _ in range(300):
            yield b" " * MB

    streamed = {}
    attack = Meanwhile(lambda: streamed.update(answer=bob.http.post("/gradio_api/queue/join", content=stream(),
                                                                    headers={"content-type": "application/json"})))
    assert answered(alice.chat("Say hi.")), "another user is answered while the attack runs"
    attack.join(timeout=120)
    assert streamed["answer"].status_code == 413 and limit in streamed["answer"].json()["detail"]
    grown = (server.memory_info().rss - before) / MB
    assert grown < 100, f"the server grew by {grown:.0f} MiB"

    # What the page sends itself still goes: a 60,000-character paste, the largest saved chats
    # a browser holds (about 4 MB), and files, which go by --max-upload-size instead.
    paste = bob.chat("word " * 12_000)
    assert "status" not in paste and error(paste) is None
    blob = {"current": "a", "chats": [{"id": "a", "title": "t", "turns": [{"role": "user", "content": "y" * 4 * MB}]}]}
    restored = bob.call("restore", [None, blob])
    assert error(restored) is None and "y" * 1000 in shown(restored)
    assert bob.upload("three-megabytes.wav", b"\0" * 3 * MB).startswith(str(app.files))


def test_an_export_is_written_as_it_is_built_and_bounded(app, tabs):
    bob = tabs("bob")
    large = bob.upload("large.wav", os.urandom(MB))
    bob.chat("Listen.", [file_data(large)] * 200)
    server = psutil.Process(app.process.pid)
    before = server.memory_info().rss
    refused = error(bob.call("export", [None, ""]))
    grown = (server.memory_info().rss - before) / MB
    assert refused and "over 4 MB, the largest conversation file this server imports (--max-upload-size)" in refused, refused
    assert grown < 64, f"the server grew by {grown:.0f} MiB building the export"
    assert not list(app.files.glob("anychat-export-*/*")), "a refused export leaves nothing behind"

    # One within the limit is written among the page's files (kept for their lifetime) and imports back.
    other = tabs("bob")
    small = other.upload("small.png", png())
    other.chat("Look.", [file_data(small)])
    exported = other.call("export", [None, "Be brief."])["output"]["data"][0]["value"]
    assert exported["path"].startswith(str(app.files))
    conversation = other.http.get(exported["url"]).json()
    assert conversation["system_prompt"] == "Be brief." and conversation["turns"][0]["files"][0]["name"] == "small.png"
    imported = tabs("bob")
    restored = imported.call("import_conversation", [None, file_data(imported.upload("conversation.json", json.dumps(conversation).encode()))])
    assert "Look." in shown(restored) and "small.png" in shown(restored)


def test_nul_bytes_in_paths_get_a_message_not_a_server_error(app, tabs):
    bob, alice = tabs("bob"), tabs("alice")
    assert error(bob.chat("Look.", [file_data("/tmp/a\0.png")]))
    blob = {"current": "a", "chats": [{"id": "a", "title": "t", "turns": [{"role": "user", "content": "Look.", "files": ["/tmp/a\0.png"]}]}]}
    assert "no longer on the server, so neither shown nor sent to the model" in shown(bob.call("restore", [None, blob]))
    assert bob.http.get("/gradio_api/file=%00").status_code == 403
    # /v1 takes the page's logins.
    bob_api = {"auth": ("bob", PASSWORDS["bob"])}
    model = httpx.get(f"{app.url}v1/models", **bob_api).json()["data"][0]["id"]
    api = httpx.post(f"{app.url}v1/chat/completions", timeout=60, **bob_api, json={"model": model, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"file://{app.files.parent}/media/a%00.png"}}]}]})
    assert api.status_code == 400 and "NUL byte" in api.json()["error"]["message"], api.text
    load = alice.call("load", ["huggingface", "/tmp/a\0b", "auto", *[None] * 5, "auto", *[None] * 4, False, None, None, *[None] * 2, "", ""])
    assert "No model at" in shown(load) and error(load) is None
    assert answered(bob.chat("Say hi."))


def test_other_users_see_model_names_not_server_paths(app, tabs):
    models = str(app.files.parent / "models")
    seen = {user: tabs(user).call("choices", [])["output"]["data"][0] for user in ("bob", "alice")}
    assert models not in json.dumps(seen["bob"]) and ["copy · models folder · GGUF · 93.8 MB · reads text", "copy"] in seen["bob"]["choices"]
    assert seen["alice"]["choices"][1][1] == f"{models}/copy.gguf" and seen["alice"]["info"].startswith(f"From {models}/")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """An app with small limits: files kept 10 s and 3 MB in all, 64 KB page requests."""
    process = AppInProcess(tmp_path_factory.mktemp("small"), ("--backend", "huggingface", "--max-file-age", "10", "--max-cache-size", "3mb",
                                                              "--max-page-request-size", "64kb"))
    yield process
    process.stop()


def test_the_pages_files_expire_and_a_chat_then_shows_them_missing(small):
    """What a user sees when the page's files reach their lifetime or the cache its size: the
    oldest go first, and a chat that names one shows it as a missing file and goes on."""
    tab = PageClient(small.url, timeout=60)
    try:
        first = Path(tab.upload("first.wav", b"\0" * 2 * MB))
        second = Path(tab.upload("second.png", png(700)))  # about 1.4 MB: with the first, over 3 MB
        tab.chat("Look.", [file_data(str(second))])
        saved = {"current": "a", "chats": [{"id": "a", "title": "t", "turns": [{"role": "user", "content": "Look.", "files": [str(second)]}]}]}
        restored = shown(tab.call("restore", [None, saved]))
        assert "second.png" in restored and "Missing" not in restored
        deadline = time.monotonic() + 60
        while first.exists():  # over 3 MB: the oldest goes first, before its lifetime is out
            assert time.monotonic() < deadline, "the cache was not swept"
            time.sleep(0.2)
        assert second.exists()
        while second.exists():
            assert time.monotonic() < deadline, "the file outlived its lifetime"
            time.sleep(0.2)
        assert tab.http.get(f"/gradio_api/file={second}").status_code == 403
        missing = "second.png: no longer on the server, so neither shown nor sent to the model"
        assert missing in shown(tab.call("restore", [None, saved]))
        reply = tab.chat("And now?")
        assert missing in shown(reply) and answered(reply)
    finally:
        tab.close()


def test_the_page_says_why_a_message_over_the_limit_is_not_sent_and_keeps_it(small, browser):
    from playwright.sync_api import expect

    page = browser.new_page()
    try:
        open_chat(page, small.url)
        box = page.locator("#chat-input textarea")
        box.fill("x" * 100_000)
        box.press("Enter")
        # The box's change (its note counts the tokens) is a request of its own, refused in the same
        # words where it reaches the server before the send: one toast or two.
        expect(page.get_by_text("over this server's limit of 64 KB (set with --max-page-request-size). Send a shorter message").first).to_be_visible()
        expect(box).to_have_value("x" * 100_000)
        box.fill("Say hi.")
        box.press("Enter")
        expect(page.locator("#chatbot .reply-stats")).to_have_count(1)
    finally:
        page.close()
