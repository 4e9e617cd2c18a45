"""The page for everyone, in a real headless Chromium against `python app.py` on the real default
model: axe-core (the npm package, run in the page) finds no serious or critical violation in
light and dark, on the empty page, the Settings tab, the sidebar, a chat with a tool call and
versions, and the shortcuts dialog; Lighthouse scores accessibility and best practices; the app
installs (manifest, icons, service worker) and says so when the server cannot be reached; the
colour scheme chosen is kept; the keyboard reaches what the mouse does; a reply is announced; a
phone attaches, sends, reads wide replies, switches chats and types above its keyboard."""

import json
import re
import subprocess

import httpx
import pytest

from harness.browser import (
    CHROMIUM, CHROMIUM_ARGS, ROOT, AppProcess, ask, bot_messages, click_and_wait, import_conversation, open_chat, open_tab, open_tools, set_number,
    wait_until_ready,
)
from harness.nginx_proxy import nginx_proxy
from store import MessageTree
from chat.turns import Turn
from chat.conversation_file import write_conversation

pytestmark = [pytest.mark.browser]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ASSETS = ROOT / "assets"
AXE = ROOT / ".cache" / "axe-core" / "axe.min.js"
LIGHTHOUSE = ROOT / ".cache" / "lighthouse" / "node_modules" / ".bin" / "lighthouse"
# What the issue asks of the page, as Lighthouse scores it (0-1).
LIGHTHOUSE_AT_LEAST = {"accessibility": 0.95, "best-practices": 0.95}
SERIOUS = ("serious", "critical")


def serious_violations(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is, one line a node."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: bash scripts/setup.sh --test fetches axe-core")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
        .filter((v) => ["serious", "critical"].includes(v.impact))
        .flatMap((v) => v.nodes.map((n) => `${v.impact} ${v.id} (${v.help}): ${n.target.join(" ")} ${n.html.slice(0, 300)}: ${n.failureSummary.replace(/\\s+/g, " ")}`))""")
    return found


def settled(page) -> None:
    """Until no CSS transition runs: colours measured mid-way are neither scheme's, and a sidebar
    sliding shut is neither open nor shut."""
    page.wait_for_function("document.getAnimations().every((a) => !(a instanceof CSSTransition) || a.playState !== 'running')")


def in_both_schemes(page, where: str) -> list[str]:
    """The violations at ``where`` in the light scheme and the dark one."""
    found = []
    for scheme in ("light", "dark"):
        page.evaluate(f"window.anychatColourScheme.choose('{scheme}')")
        expect(page.locator("body")).to_have_class(re.compile(r"\bdark\b") if scheme == "dark" else re.compile(r"^(?!.*\bdark\b)"))
        settled(page)
        found += [f"{where}, {scheme}: {line}" for line in serious_violations(page)]
    return found


def test_axe_finds_no_serious_or_critical_violation_anywhere_in_light_or_dark(page, tmp_path):
    found = in_both_schemes(page, "the empty page")
    open_tab(page, "Settings")
    found += in_both_schemes(page, "the Settings tab")
    # A tool call and its result, then a second version of the reply.
    open_tools(page)
    page.locator("#run-tools").get_by_label("calculator").check()
    ask(page, "What is 17 times 23?")
    page.locator("#chatbot").get_by_text(re.compile(r"^(⚙ calculator|⚠ calculator failed)$")).click()
    click_and_wait(page, "regenerate-btn")
    expect(page.locator("#chatbot .versions")).to_contain_text("2/2")
    found += in_both_schemes(page, "a chat with a tool call and versions")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ASSETS / "dark.png"))
    conversation = tmp_path / "code.json"
    write_conversation(str(conversation), MessageTree.line([Turn(role="user", content="Show me code."),
                                                            Turn(role="assistant", content=WIDE_REPLY)]), "", 10**6)
    import_conversation(page, conversation)
    expect(page.locator("#chatbot pre code .token").first).to_be_visible()  # highlighted
    found += in_both_schemes(page, "a reply with highlighted code and a table")
    page.keyboard.press("?")
    expect(page.locator("#shortcuts-help")).to_be_visible()
    found += in_both_schemes(page, "the shortcuts dialog")
    page.keyboard.press("Escape")
    page.set_viewport_size({"width": 390, "height": 844})
    page.evaluate("window.anychatColourScheme.choose('light')")
    sidebar = page.locator("#chats-sidebar")
    if "open" in sidebar.get_attribute("class").split():  # open from the wide window before
        sidebar.locator(".toggle-button").click()
    expect(sidebar).not_to_have_class(re.compile(r"\bopen\b"))
    settled(page)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ASSETS / "phone.png"))
    sidebar.locator(".toggle-button").click()
    expect(sidebar).to_have_class(re.compile(r"\bopen\b"))
    found += in_both_schemes(page, "the sidebar open on a phone")
    assert not found, "\n".join(found)


def test_lighthouse_scores_the_page_at_95_or_more(app, tmp_path):
    if not LIGHTHOUSE.exists():
        pytest.fail(f"{LIGHTHOUSE} is missing: bash scripts/setup.sh --test installs Lighthouse")
    report = tmp_path / "lighthouse.json"
    run = subprocess.run(
        [str(LIGHTHOUSE), app.url, "--output=json", f"--output-path={report}", "--only-categories=accessibility,best-practices",
         "--quiet", "--chrome-flags=--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage",
         # Scores, not timings: no simulated slow phone, no screenshot. The page's open event stream
         # never lets the network go quiet, which Lighthouse would wait for until this limit.
         "--throttling-method=provided", "--form-factor=desktop", "--screenEmulation.disabled", "--disable-full-page-screenshot",
         "--max-wait-for-load=20000"],
        env={"CHROME_PATH": CHROMIUM, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(report.read_text())
    scores = {name: category["score"] for name, category in result["categories"].items()}
    failed = {audit["id"]: audit["title"] for audit in result["audits"].values()
              if audit["score"] is not None and audit["score"] < 1 and audit["scoreDisplayMode"] == "binary"}
    for name, least in LIGHTHOUSE_AT_LEAST.items():
        assert scores[name] >= least, f"{name} {scores[name]}; failed audits: {failed}"


@pytest.fixture
def profile(browser, tmp_path):
    """A context with a profile on disk: Chromium installs no app from a private (incognito) one,
    which every other context is."""
    context = browser.browser_type.launch_persistent_context(tmp_path / "profile", executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                              viewport={"width": 1280, "height": 900})
    yield context
    context.close()


def installable(context, page) -> list[dict]:
    """Why Chromium would not offer to install the page (nothing where it would)."""
    page.evaluate("navigator.serviceWorker.ready")
    return context.new_cdp_session(page).send("Page.getInstallabilityErrors")["installabilityErrors"]


def test_the_app_installs_and_says_so_when_the_server_cannot_be_reached(app, profile):
    manifest = httpx.get(app.url + "manifest.json").json()
    assert manifest["name"] == "anychat" and manifest["display"] == "standalone"
    for icon in manifest["icons"]:
        answer = httpx.get(app.url + icon["src"])
        assert answer.status_code == 200 and answer.headers["content-type"] == "image/png", icon
    page = profile.new_page()
    open_chat(page, app.url)
    assert page.locator("link[rel=manifest]").get_attribute("href") == "manifest.json", "relative: it works under a proxy's path prefix"
    assert installable(profile, page) == [], "Chromium offers to install it"
    profile.set_offline(True)
    try:
        page.reload()
        expect(page.get_by_role("heading", name="The server cannot be reached")).to_be_visible()
    finally:
        profile.set_offline(False)
    page.get_by_role("button", name="Try again").click()
    expect(page.locator("#chat-input")).to_be_visible()


def test_it_installs_behind_a_login_under_a_proxys_path_prefix(profile, tmp_path):
    app = AppProcess(tmp_path, ("--auth", "ann:ann-secret", "--root-path", "/chat"))
    (tmp_path / "nginx").mkdir()
    try:
        with nginx_proxy([app.url], tmp_path / "nginx", prefix="/chat/") as url:
            page = profile.new_page()
            page.goto(url)
            page.get_by_label("username").fill("ann")
            page.get_by_label("password").fill("ann-secret")
            page.get_by_role("button", name="Login").click()
            wait_until_ready(page)
            assert page.evaluate("async () => (await navigator.serviceWorker.ready).scope") == url, "the prefix's worker, through the proxy"
            assert installable(profile, page) == []
    finally:
        app.stop()


def test_the_colour_scheme_chosen_is_kept_across_a_reload(page):
    page.emulate_media(color_scheme="light")
    open_tab(page, "Settings")
    page.locator("#colour-scheme").get_by_label("Dark").check()
    expect(page.locator("body")).to_have_class(re.compile(r"\bdark\b"))
    page.reload()
    expect(page.locator("body")).to_have_class(re.compile(r"\bdark\b"))
    open_tab(page, "Settings")
    expect(page.locator("#colour-scheme").get_by_label("Dark")).to_be_checked()
    page.locator("#colour-scheme").get_by_label("System").check()
    expect(page.locator("body")).not_to_have_class(re.compile(r"\bdark\b"))
    page.emulate_media(color_scheme="dark")
    expect(page.locator("body")).to_have_class(re.compile(r"\bdark\b")), "the system's, as it changes"


def test_the_keyboard_reaches_the_shortcuts_and_the_version_arrows_and_a_reply_is_announced_whole(page):
    box = page.locator("#chat-input textarea")
    page.locator("#title").click()
    page.keyboard.press("?")
    dialog = page.locator("#shortcuts-help")
    expect(dialog).to_be_visible()
    expect(dialog.locator("kbd")).to_contain_text(["Enter", "Shift+Enter", "Escape"])
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.keyboard.press("Shift+Escape")
    expect(box).to_be_focused()
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 30)
    open_tab(page, "Chat")
    ask(page, "Say hello.")
    first = bot_messages(page).last.inner_text()
    announced = page.locator("#reply-announcer")
    expect(announced).not_to_be_empty()
    assert first.strip().endswith(announced.inner_text().strip()), "the reply's last sentences, as written"
    assert page.locator("#chatbot [role=log]").get_attribute("aria-live") == "off", "not every token read out"
    click_and_wait(page, "regenerate-btn")
    back = page.locator("#chatbot .version-go")
    expect(back).to_have_attribute("role", "button")
    back.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chatbot .versions")).to_contain_text("1/2")


WIDE_REPLY = ("Here is the line:\n\n```python\nrows = [" + ", ".join(f"'column {n}'" for n in range(40)) + "]\n```\n\n"
              "| " + " | ".join(f"heading {n}" for n in range(12)) + " |\n|" + "---|" * 12 + "\n| "
              + " | ".join(f"cell {n}" for n in range(12)) + " |\n")


def test_a_phone_attaches_sends_reads_switches_chats_and_types_above_its_keyboard(browser, app, tmp_path):
    """At 390×844 with touch, as a phone: the page opens on the chat; a file attached and a message
    sent are answered, with nothing wider than the screen; a reply's code and tables wider than the
    screen scroll inside the message, not the page; the sidebar switches chats and gets out of
    the way; and with the on-screen keyboard up (the page told to shrink with it), the box typed
    in stays above it."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        open_chat(page, app.url)
        sidebar = page.locator("#chats-sidebar")
        expect(sidebar).not_to_have_class(re.compile(r"\bopen\b"))
        note = tmp_path / "harbour.txt"
        note.write_text("The harbour opens at six in the morning and closes at ten at night.\n")
        open_tab(page, "Settings")
        set_number(page, "max-new-tokens", 24)
        open_tab(page, "Chat")
        page.locator("#chat-input input[type=file]").set_input_files(str(note))
        expect(page.locator("#attachments-note")).to_contain_text("harbour.txt")
        ask(page, "When does the harbour open?")
        expect(page.locator("#chatbot [data-testid=user] details.document-chip summary")).to_contain_text("harbour.txt")
        expect(bot_messages(page).last).not_to_be_empty()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390

        conversation = tmp_path / "wide.json"
        write_conversation(str(conversation), MessageTree.line([Turn(role="user", content="Show me wide things."),
                                                                Turn(role="assistant", content=WIDE_REPLY)]), "", 10**6)
        import_conversation(page, conversation)
        code, table = page.locator("#chatbot pre:has(code)").last, page.locator("#chatbot table").last
        expect(table).to_be_visible()
        for wide in (code, table):
            width = wide.evaluate("(element) => [element.scrollWidth, element.clientWidth, element.getBoundingClientRect().right]")
            assert width[0] > width[1] and width[2] <= 390, f"wider than it shows, and within the screen: {width}"
            assert wide.evaluate("(element) => { element.scrollLeft = 80; return element.scrollLeft; }") > 0, "it scrolls itself"
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, "the page does not scroll sideways"

        sidebar.locator(".toggle-button").click()
        expect(sidebar).to_have_class(re.compile(r"\bopen\b"))
        page.locator("#chat-list").get_by_text("When does the harbour open?").click()
        expect(sidebar).not_to_have_class(re.compile(r"\bopen\b"))
        expect(page.locator("#chatbot [data-testid=user]").filter(has_text="When does the harbour open?")).to_have_count(1)
        expect(page.locator("#chatbot table")).to_have_count(0)

        viewport = page.locator("meta[name=viewport]").get_attribute("content")
        assert "interactive-widget=resizes-content" in viewport, viewport
        page.locator("#chat-input textarea").focus()
        page.set_viewport_size({"width": 390, "height": 844 - 336})  # a phone keyboard's height, as the page then sees it
        for control in ("#chat-input textarea", "#chat-input .submit-button"):
            expect(page.locator(control)).to_be_in_viewport(ratio=1)
    finally:
        context.close()


def test_a_logged_in_users_theme_and_language_follow_them_to_another_browser(browser, tmp_path):
    """Chosen by ann in one browser, dark and French are hers in the next browser she logs in
    from (a new context: nothing of the first one's localStorage); bob's page stays as his
    browser has it."""
    app = AppProcess(tmp_path, ("--auth", "ann:ann-secret", "--auth", "bob:bob-secret"))
    contexts = []

    def logged_in(user):
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US", color_scheme="light")
        contexts.append(context)
        page = context.new_page()
        page.goto(app.url)
        page.get_by_label("username").fill(user)
        page.get_by_label("password").fill(f"{user}-secret")
        page.get_by_role("button", name="Login").click()
        expect(page.locator("#chat-input")).to_be_visible()
        return page

    try:
        first = logged_in("ann")
        open_tab(first, "Settings")
        first.locator("#colour-scheme").get_by_label("Dark").check()
        expect(first.locator("body")).to_have_class(re.compile(r"\bdark\b"))
        first.locator("#page-language input[role=combobox]").click()
        with first.expect_navigation():  # a choice reloads the page
            first.get_by_role("option", name="Français", exact=True).click()
        expect(first.locator("html")).to_have_attribute("lang", re.compile(r"^fr"))

        second = logged_in("ann")
        expect(second.locator("body")).to_have_class(re.compile(r"\bdark\b"))
        expect(second.locator("html")).to_have_attribute("lang", re.compile(r"^fr"))
        open_tab(second, "Paramètres")
        expect(second.locator("#colour-scheme").get_by_label("Sombre")).to_be_checked()

        other = logged_in("bob")
        expect(other.locator("html")).to_have_attribute("lang", re.compile(r"^en"))
        expect(other.locator("body")).not_to_have_class(re.compile(r"\bdark\b"))
    finally:
        for context in contexts:
            context.close()
        app.stop()
