"""A server with logins, admins and limits: what each user may do, in Chromium and through
gradio_client, against the app of `python app.py` on the real default model (served in the test
process: harness/app_in_process.py); and the page's queue filling up.

Needs Debian's chromium and the playwright Python package, like tests/test_browser.py.
"""

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from gradio_client.utils import QueueError, Status

from engines import LoadedModels
from harness.app_in_process import AppInProcess
from harness.browser import CHROMIUM, free_port
from harness.soak_cycles import load_request
from tests.held_load import load_held
from webui.layout import build_demo

pytestmark = [pytest.mark.browser, pytest.mark.server]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
NEEDS_ADMIN = "Model management needs an admin"
# /load's empty fields have no default: they are sent as the page sends them.
DEFAULT_MODEL = load_request({"infer_backend": "huggingface"})


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """Two users, alice (admin, from --auth) and bob (from --auth-file), and small limits."""
    folder = tmp_path_factory.mktemp("app")
    users = folder / "users.txt"
    users.write_text("# one user:pass a line\nbob:bob-secret\n")
    process = AppInProcess(folder, ("--backend", "huggingface", "--auth", "alice:alice-secret", "--auth-file", str(users), "--admin", "alice",
                                    "--max-upload-size", "2kb", "--max-request-size", "1kb"))
    yield process
    process.stop()


@pytest.fixture
def log_in(app, browser):
    contexts = []

    def log_in(user):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.goto(app.url)
        page.get_by_label("username").fill(user)
        page.get_by_label("password").fill(USERS[user])
        page.get_by_role("button", name="Login").click()
        page.get_by_role("tab", name="Settings").click()
        expect(page.locator("#model-status")).to_contain_text("Loaded SmolLM2-135M-Instruct (embedded) on huggingface")
        return page

    yield log_in
    for context in contexts:
        context.close()


MANAGEMENT = ["#load-btn", "#unload-btn", "#model-path textarea, #model-path input", "#engine-args textarea"]


def test_others_see_the_model_settings_read_only(log_in):
    page = log_in("bob")
    expect(page.locator("#rights-note")).to_contain_text("Signed in as bob")
    expect(page.locator("#rights-note")).to_contain_text(NEEDS_ADMIN)
    page.locator("#backend-options").get_by_text("Backend options").click()
    for control in MANAGEMENT:
        expect(page.locator(control).first).to_be_disabled()

    page = log_in("alice")
    expect(page.locator("#rights-note")).to_be_hidden()
    page.locator("#backend-options").get_by_text("Backend options").click()
    for control in MANAGEMENT:
        expect(page.locator(control).first).to_be_enabled()


def test_a_user_who_is_not_admin_cannot_load_or_unload_through_gradio_client(app):
    bob = Client(app.url, auth=("bob", USERS["bob"]), verbose=False)
    for call in (lambda: bob.predict(api_name="/unload"),
                 lambda: bob.predict(**DEFAULT_MODEL, api_name="/load")):
        with pytest.raises(AppError, match=f"bob may not load or unload models. {NEEDS_ADMIN}"):
            call()
    alice = Client(app.url, auth=("alice", USERS["alice"]), verbose=False)
    status = alice.predict(**DEFAULT_MODEL | {"engine_args": '{"trust_remote_code": true}'}, api_name="/load")[0]
    assert "engine_args must not hold trust_remote_code" in status and "--trust-remote-code" in status, status
    # Nothing bob or that request asked for happened: the model that was loaded still answers.
    assert "Loaded SmolLM2-135M-Instruct (embedded) on huggingface" in status
    reply = alice.predict({"text": "Hi", "files": []}, system="", tools="", temperature=0, max_new_tokens=4, seed=None, api_name="/chat")[0]
    assert reply[-1]["role"] == "assistant" and "could not answer" not in json.dumps(reply)


def test_an_upload_over_the_limit_is_refused_in_the_page(log_in, tmp_path):
    page = log_in("alice")
    page.get_by_role("tab", name="Chat").click()
    too_big = tmp_path / "conversation.json"
    too_big.write_text(json.dumps({"system_prompt": "x" * 3000, "turns": []}))
    page.get_by_text("Conversation file").click()
    with page.expect_file_chooser() as chooser:
        page.locator("#import-btn").click()
    chooser.value.set_files(str(too_big))
    expect(page.get_by_text(re.compile(r"exceed the maximum allowed size of 2\.0 Kb"))).to_be_visible()
    expect(page.locator("#system-prompt textarea")).to_have_value("")


def test_an_api_body_over_the_limit_gets_413(app):
    body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "x" * 2000}]}
    answer = httpx.post(f"{app.url}v1/chat/completions", json=body, auth=("bob", USERS["bob"]), timeout=60)
    assert answer.status_code == 413
    assert "over this server's limit of 1 KB (set with --max-request-size)" in answer.json()["error"]["message"]


@pytest.fixture(scope="module")
def loaded_models():
    loaded_models = LoadedModels()
    yield loaded_models
    loaded_models.unload()


def test_a_full_queue_says_the_server_is_busy(loaded_models, browser):
    """With room for one waiting request: while a model switch holds the model, one unload runs
    (waiting for it), one waits its turn, and the next is told the server is busy."""
    demo = build_demo(loaded_models).queue(max_size=1)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        page = browser.new_page()
        page.goto(url)
        page.get_by_role("tab", name="Settings").click()
        expect(page.locator("#model-status")).to_contain_text("No model loaded")
        client = Client(url, verbose=False)
        with load_held(loaded_models, {"infer_backend": "huggingface"}):
            running = client.submit(api_name="/unload")
            wait_for(lambda: running.status().code == Status.PROCESSING)
            waiting = client.submit(api_name="/unload")
            wait_for(lambda: waiting.status().code == Status.IN_QUEUE)
            with pytest.raises(QueueError, match="Queue is full"):
                client.submit(api_name="/unload").result(timeout=60)  # a queue with room would leave it waiting
            page.locator("#unload-btn").click()
            expect(page.get_by_text(re.compile("This application is currently busy")).first).to_be_visible()
        running.result(timeout=300)
        waiting.result(timeout=300)
        page.close()
    finally:
        demo.close()


def wait_for(condition, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
