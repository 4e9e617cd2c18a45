"""The page in a real headless Chromium, against `python app.py` on the real default model.

Needs Debian's chromium (`apt-get install -y chromium`) and the playwright Python package.
One app process serves every test here; each test opens its own browser context (its own tab
state). The screenshots in assets/ are taken here.
"""

import importlib.util
import re
import time
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from engines.model_files.paths import default_gguf
from harness.browser import (
    CHROMIUM, ROOT, WATCH_REPLY, ask, bot_messages, click_and_wait, is_local, load_model, open_chat, open_tab, open_tools, replies, send, set_number,
    shown_messages, user_messages, wait_until_answered,
)
from harness.mcp_config import demo_entry
from store import MessageTree
from chat.turns import Turn
from chat.conversation_file import write_conversation

pytestmark = [pytest.mark.browser, pytest.mark.server]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)

LONG = 120_000  # ms; replies on a busy 2-core machine are slow
ASSETS = ROOT / "assets"
UPLOAD_BUTTON = "#chat-input [data-testid=upload-button]"
FILE_INPUT = "#chat-input input[type=file]"
# A text-only model's box takes documents (their text reaches any model) and no media.
DOCUMENTS_ONLY = re.compile(r"^(?!.*image)(?!.*audio)(?!.*video).*\.pdf.*\.docx.*\.txt")
# What auto runs a GGUF file on here.
GGUF_BACKEND = "llamacpp" if importlib.util.find_spec("llama_cpp") else "huggingface"
# The app's MCP servers (tests/conftest.py): the demo server, and one whose command is missing.
MCP_SERVERS = {"demo": demo_entry(), "missing": {"command": "no-such-command-here"}}
STATS = re.compile(r"^(?:■ stopped after )?(\d+) tokens(?: \(max_new_tokens reached\))?(?: · ([\d.]+) tokens/s)? · first token [\d.]+ m?s"
                   r"(?: · [\d,]+-token prompt(?:, [\d,]+ cached)?)? · (\w+)$")


def reply_stats(page):
    return page.locator("#chatbot .reply-stats")


def check_stats(page, backend, rate_shown=True):
    """The last reply's stats line, with plausible numbers from ``backend``; returns its token count.
    Without ``rate_shown``, a line without a rate passes too: a reply whose tokens after the first
    all came at once has none (the random-weight test model's reply, which is as long as the
    sampled conversation before it makes it, was once 2 tokens, both in one piece of text)."""
    line = reply_stats(page).last.inner_text().strip()
    match = STATS.match(line)
    assert match, f"not a stats line: {line!r}"
    tokens, rate, written_by = int(match[1]), match[2], match[3]
    assert tokens > 0 and written_by == backend, line
    assert float(rate or 0) > 0 or (rate is None and not rate_shown), f"no rate: {line}"
    return tokens


def test_a_message_gets_a_streamed_reply(page):
    # Long enough to be seen growing: on llama.cpp a short answer is written in a tenth of a second.
    # Bounded all the same: the default 1024 tokens took over 3 minutes on a busy 2-core machine.
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 300)
    open_tab(page, "Chat")
    sent = send(page, "Write a long story about a lighthouse keeper and a storm.")
    expect(user_messages(page)).to_have_count(1)
    expect(user_messages(page).first).to_contain_text("a lighthouse keeper and a storm")
    page.wait_for_function(f"window.replies > {sent}")
    reply = bot_messages(page).last
    lengths = []
    deadline = time.monotonic() + LONG / 1000
    while time.monotonic() < deadline and page.locator("#stop-btn").is_visible():
        if reply.count():
            lengths.append(len(reply.inner_text()))
        time.sleep(0.1)
    wait_until_answered(page, sent)
    growing = sorted(set(length for length in lengths if length))
    assert len(growing) >= 3, f"the reply did not stream: lengths seen {growing}"
    assert len(bot_messages(page).last.inner_text()) >= max(growing)


def test_a_finished_reply_says_how_it_was_written(page):
    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", 200)
    open_tab(page, "Chat")
    sent = send(page, "Give me three tips for sleeping well.")
    page.wait_for_function(f"window.replies > {sent}")
    # No stats while the reply is written: they come with the finished reply.
    expect(reply_stats(page)).to_have_count(0)
    wait_until_answered(page, sent)
    expect(reply_stats(page)).to_have_count(1)
    tokens = check_stats(page, GGUF_BACKEND)
    assert tokens <= 200 and len(bot_messages(page).last.inner_text().split()) > tokens / 4
    page.screenshot(path=str(ASSETS / "chat.png"))


def test_an_image_reaches_a_multimodal_model_and_a_text_model_offers_documents_only(page, tiny_vision_model, tmp_path):
    expect(page.locator(FILE_INPUT)).to_have_attribute("accept", DOCUMENTS_ONLY)
    expect(page.locator("#pdfs-as-images")).to_be_hidden()
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 60)
    open_tab(page, "Chat")
    ask(page, "Hi! Give me one tip for taking photos.")

    load_model(page, str(tiny_vision_model), f"Loaded {tiny_vision_model.name} on huggingface")
    expect(page.locator("#model-status")).to_contain_text("Reads text, images.")
    # Its random weights say nothing worth reading: a few tokens show that a reply comes.
    set_number(page, "max-new-tokens", 6)
    open_tab(page, "Chat")
    expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile(r"Message \(text, images, documents\)"))
    expect(page.locator("#pdfs-as-images")).to_be_visible()
    expect(page.locator(UPLOAD_BUTTON)).to_have_count(1)
    picture = tmp_path / "sunset.png"
    draw_picture(picture)
    page.locator("#chat-input input[type=file]").set_input_files(str(picture))
    expect(page.locator("#chat-input img")).to_have_count(1)
    ask(page, "What is in this picture?")
    # The Chatbot shows each part of a message (the image, the text) as its own element.
    expect(user_messages(page).last).to_contain_text("What is in this picture?")
    expect(page.locator("#chatbot [data-testid=user] img")).to_have_count(1)
    expect(bot_messages(page)).to_have_count(2)
    expect(bot_messages(page).last).not_to_contain_text("could not answer")
    assert bot_messages(page).last.inner_text().strip(), "the multimodal model gave no reply"

    load_model(page, "", "Loaded SmolLM2-135M-Instruct (embedded) on")
    open_tab(page, "Chat")
    expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile("reads text only"))
    expect(page.locator(FILE_INPUT)).to_have_attribute("accept", DOCUMENTS_ONLY)
    # The image already in the conversation reaches a model that cannot read it: the engine
    # refuses clearly, and the conversation stays as it was.
    ask(page, "Thanks! Another tip, please.")
    expect(bot_messages(page).last).to_contain_text("This model does not accept images")
    expect(user_messages(page).last).to_contain_text("Another tip")
    expect(user_messages(page).first).to_contain_text("one tip for taking photos")
    expect(page.locator("#chatbot [data-testid=user] img")).to_have_count(1)


def test_stop_keeps_the_partial_reply_and_the_box_usable(page):
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 600)
    open_tab(page, "Chat")
    send(page, "Write a very long story about a lighthouse keeper.")
    expect(bot_messages(page).last).to_contain_text(" ")
    page.wait_for_timeout(1500)
    page.locator("#stop-btn").click()
    expect(reply_stats(page)).to_contain_text("■ stopped after")
    check_stats(page, GGUF_BACKEND)
    expect(page.locator("#chat-input textarea")).to_be_enabled()
    partial = shown_messages(page)
    page.wait_for_timeout(1500)
    assert shown_messages(page) == partial, "the reply kept growing after Stop"
    # The box takes the next message, and Stop works again.
    sent = send(page, "Now a long poem about the sea, please.")
    expect(user_messages(page)).to_have_count(2)
    expect(bot_messages(page).last).not_to_contain_text("stopped")
    page.locator("#stop-btn").click()
    wait_until_answered(page, sent)
    expect(reply_stats(page).filter(has_text="■ stopped after")).to_have_count(2)


def test_regenerate_edit_undo_and_a_short_max_new_tokens(page):
    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", 3)
    open_tab(page, "Chat")
    ask(page, "Tell me about the history of the Roman Empire in detail.")
    short = bot_messages(page).last.inner_text().strip()
    assert 0 < len(short.split()) <= 4, f"max_new_tokens=3 gave {short!r}"
    click_and_wait(page, "regenerate-btn")
    expect(bot_messages(page)).to_have_count(1)
    assert bot_messages(page).last.inner_text().strip() == short, "greedy regenerate gave another reply"
    # Continue writes on in the same message, and its stats cover both parts.
    click_and_wait(page, "continue-btn")
    expect(bot_messages(page)).to_have_count(1)
    expect(reply_stats(page)).to_have_count(1)
    expect(reply_stats(page).last).to_contain_text("6 tokens (max_new_tokens reached)")
    longer = bot_messages(page).last.inner_text().strip()
    assert longer.startswith(short) and len(longer) > len(short), f"Continue after {short!r} gave {longer!r}"

    before = replies(page)
    edit_first_message(page, "Tell me about Greek history.")
    wait_until_answered(page, before)
    expect(user_messages(page)).to_have_count(1)
    expect(user_messages(page).first).to_contain_text("Tell me about Greek history.")
    expect(bot_messages(page)).to_have_count(1)

    page.locator("#undo-btn").click()
    expect(user_messages(page)).to_have_count(0)
    expect(page.locator("#chat-input textarea")).to_have_value("Tell me about Greek history.")


def edit_first_message(page, text):
    user_messages(page).first.hover()
    page.get_by_role("button", name="Edit").first.click()
    page.locator("#chatbot textarea.edit-textarea").fill(text)
    page.get_by_role("button", name="Submit").first.click()


# The page reads an edit's event id from its join answer a second late, while another event of the
# tab (the note on the box, as its text changes) has the tab's stream open: the edit's first updates
# reach the page before it knows the event, and Gradio's client keeps them and hands them over
# together, as it did on a loaded machine.
EDIT_KNOWN_LATE = """(() => {
    const fetch = window.fetch.bind(window);
    window.fetch = async (url, init) => {
        const response = await fetch(url, init);
        if (String(url).includes("/queue/join") && JSON.parse(init.body).fn_index === window.editKnownLate) {
            const box = document.querySelector("#chat-input textarea");
            box.value = "x";
            box.dispatchEvent(new Event("input", {bubbles: true}));
            await new Promise(resolve => setTimeout(resolve, 1000));
        }
        return response;
    };
})()"""


def test_an_edits_reply_shows_stop_when_its_first_updates_reach_the_page_together(app, browser):
    """Gradio's client applies each update of a stream, a diff from the one before, in place to
    that one: handed the edit's "show Stop" and the next update together, it took the "shown" out
    before the page applied it, and the reply was written with no Stop to press (in a loaded CI run,
    a test waited in vain for the Stop of its edit's reply)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(EDIT_KNOWN_LATE)
        page = context.new_page()
        open_chat(page, app.url)
        open_tab(page, "Settings")
        set_number(page, "max-new-tokens", 3)
        open_tab(page, "Chat")
        ask(page, "Tell me about the history of the Roman Empire in detail.")
        page.evaluate("window.editKnownLate = window.gradio_config.dependencies.find(listener => listener.api_name === 'edit').id")
        before = replies(page)
        edit_first_message(page, "Tell me about Greek history.")
        wait_until_answered(page, before)  # replies are counted as Stop appears
        expect(user_messages(page)).to_have_text(["Tell me about Greek history."])
        expect(reply_stats(page)).to_have_count(1)
    finally:
        context.close()


def test_two_tabs_chatting_at_once_stay_separate(open_page):
    first, second = open_page(), open_page()
    first_sent = send(first, "Say the word apple.")
    second_sent = send(second, "Say the word banana.")
    wait_until_answered(first, first_sent)
    wait_until_answered(second, second_sent)
    for page, mine, theirs in ((first, "apple", "banana"), (second, "banana", "apple")):
        expect(user_messages(page)).to_have_count(1)
        expect(user_messages(page).first).to_contain_text(mine)
        assert theirs not in user_messages(page).first.inner_text()


def test_a_tool_the_chat_runs_shows_its_call_and_result_as_text(page):
    open_tools(page)
    page.locator("#run-tools").get_by_label("calculator").check()
    ask(page, "What is 17 times 23?")
    chat = page.locator("#chatbot")
    call = chat.get_by_text(re.compile(r"^(⚙ calculator|⚠ calculator failed)$"))
    expect(call).to_have_count(1)
    call.click()  # a collapsed block opens on its title
    expect(chat.get_by_text(re.compile(r"^(Result|Error)$"))).to_be_visible()
    expect(chat.get_by_text("Tool call: calculator")).to_have_count(0), "a call that ran shows as run, not as one for the user"


def test_the_mcp_servers_are_listed_and_their_tools_run_asking_first_where_they_may_change_something(page):
    open_tools(page)
    servers = page.locator("#mcp-servers")
    expect(servers).to_contain_text("demo: ready: demo__add")
    expect(servers).to_contain_text("missing: failed (its command was not found: no-such-command-here)")
    page.locator("#run-tools").get_by_label("demo__add").check()
    # The small model may call it again after its result: two answers at most.
    set_number(page, "tool-steps", 2)
    ask(page, "What is 2 plus 40?")
    calls = page.locator("#chatbot").get_by_text(re.compile(r"^(⚙ demo__add|⚠ demo__add failed)$"))
    expect(calls.first).to_be_visible()
    calls.first.click()
    expect(page.locator("#chatbot").get_by_text(re.compile(r"^(Result|Error)$")).first).to_be_visible()
    expect(page.locator("#chatbot .tool-approval")).to_have_count(0), "a read-only tool runs without asking"
    # A tool that may change something asks first; denied, it does not run, and the model is told.
    page.locator("#run-tools").get_by_label("demo__add").uncheck()
    page.locator("#run-tools").get_by_label("demo__write_note").check()
    before = send(page, "Note that the sky is blue.")
    question = page.locator("#chatbot .tool-approval")
    expect(question).to_contain_text("✋ Run demo__write_note? Allow once · Always in this chat · Deny")
    expect(page.locator("#chatbot").get_by_text("✋ demo__write_note: waiting for your say")).to_be_visible()
    question.get_by_text("Deny").click()
    wait_until_answered(page, before)
    denied = page.locator("#chatbot").get_by_text("⚠ demo__write_note failed")
    expect(denied.first).to_be_visible()
    denied.first.click()
    expect(page.locator("#chatbot").get_by_text("denied by the user").first).to_be_visible()


def test_a_python_block_of_a_reply_runs_in_the_browser_and_shows_what_it_printed(page, tmp_path):
    code = "import sys\nprint(sum(range(10)), sys.platform)\n"
    conversation = tmp_path / "python.json"
    write_conversation(str(conversation), MessageTree.line([
        Turn(role="user", content="Sum 0 to 9 in Python."),
        Turn(role="assistant", content=f"Here:\n\n```python\n{code}```\n\nand an error:\n\n```python\n1/0\n```")]), "", 10**6)
    page.get_by_text("Conversation file", exact=True).click()
    with page.expect_file_chooser() as chooser:
        page.locator("#import-btn").click()
    chooser.value.set_files(str(conversation))
    runs = page.locator("#chatbot .python-run button")
    expect(runs).to_have_count(2)
    runs.first.click()
    # It ran here, in the browser's WebAssembly Python (Pyodide): not on the server, whose platform is linux.
    expect(page.locator("#chatbot .python-output").first).to_have_text("45 emscripten\n", timeout=LONG)
    runs.last.click()
    failed = page.locator("#chatbot .python-output.failed")
    expect(failed).to_contain_text("ZeroDivisionError: division by zero", timeout=LONG)
    # Gradio draws a reply again from its text on a later update of the chat (which once came while a
    # run ran, in a loaded CI run): the new drawing shows what each block printed, still.
    page.evaluate("""() => {
        const reply = document.querySelector("#chatbot [data-testid=bot] .python-run").closest("[data-testid=bot]");
        const drawn = reply.cloneNode(true);
        drawn.querySelectorAll(".python-run").forEach((bar) => bar.remove());
        reply.replaceWith(drawn);
    }""")
    expect(page.locator("#chatbot .python-output")).to_have_text(["45 emscripten\n", re.compile("ZeroDivisionError: division by zero")])


def test_the_models_python_call_runs_in_the_browser(page):
    open_tools(page)
    page.locator("#run-tools").get_by_label("python", exact=True).check()
    set_number(page, "tool-steps", 2)
    # Greedy, the small model calls it with {"code": "42"} (an expression: its value is the output).
    before = send(page, "Call python with the code 42.")
    chat = page.locator("#chatbot")
    asking = chat.locator("[data-testid=bot]").filter(has=page.locator(".browser-run"))
    expect(asking).to_contain_text("The model asks to run this in your browser: press ▶ Run under it.")
    asking.locator(".python-run button").click()
    wait_until_answered(page, before)
    call = chat.get_by_text(re.compile(r"^(⚙ python|⚠ python failed)$")).first
    expect(call).to_be_visible()
    call.click()
    shown = chat.inner_text()
    # What the browser's Python gave, not that no browser ran it.
    assert "did not run it" not in shown and "has none" not in shown, shown
    expect(chat.get_by_text("Result", exact=True).first).to_be_visible()
    expect(chat.locator("code").filter(has_text=re.compile(r"^42\s*$")).first).to_be_visible()


def choose_backend(page, name):
    page.locator("#backend input[role=combobox]").click()
    page.get_by_role("option", name=name, exact=True).click()


def test_switching_backends_keeps_the_conversation(page):
    pytest.importorskip("llama_cpp", reason="the llamacpp backend is not installed", exc_type=ImportError)
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 8)
    open_tab(page, "Chat")
    ask(page, "Hello! Who are you?")
    for backend in ("huggingface", "llamacpp", "huggingface"):
        open_tab(page, "Settings")
        choose_backend(page, backend)
        page.locator("#load-btn").click()
        expect(page.locator("#model-status")).to_contain_text(f"Loaded SmolLM2-135M-Instruct (embedded) on {backend} in")
        open_tab(page, "Chat")
        ask(page, f"Say hello from {backend}.")
    expect(user_messages(page)).to_have_count(4)
    expect(user_messages(page).first).to_contain_text("Hello! Who are you?")
    expect(bot_messages(page)).to_have_count(4)
    for reply in bot_messages(page).all():
        assert reply.inner_text().strip(), "a backend gave no reply"
        expect(reply).not_to_contain_text("could not answer")


def test_unload_and_load_in_settings(page):
    ask(page, "Hello there!")
    open_tab(page, "Settings")
    page.screenshot(path=str(ASSETS / "settings.png"))
    page.locator("#unload-btn").click()
    expect(page.locator("#model-status")).to_contain_text("No model loaded.")
    open_tab(page, "Chat")
    ask(page, "Are you there?")
    expect(bot_messages(page).last).to_contain_text("No model is loaded")

    open_tab(page, "Settings")
    choose_backend(page, "sglang")
    page.locator("#load-btn").click()
    expect(page.locator("#model-status")).to_contain_text("The sglang backend needs sglang")
    choose_backend(page, "huggingface")
    page.locator("#load-btn").click()
    expect(page.locator("#model-status")).to_contain_text("Loaded SmolLM2-135M-Instruct (embedded) on huggingface in")

    open_tab(page, "Chat")
    click_and_wait(page, "regenerate-btn")
    expect(user_messages(page)).to_have_count(2)
    expect(user_messages(page).first).to_contain_text("Hello there!")
    expect(bot_messages(page).last).not_to_contain_text("No model is loaded")


def picker_options(page):
    """The model picker's entries, read from the open list."""
    page.locator("#model-picker input").click()
    options = page.locator("#model-picker").get_by_role("option")
    expect(options.first).to_be_visible()
    return options.all_inner_texts()


def close_picker(page):
    page.locator("#model-status").click()
    expect(page.locator("#model-picker").get_by_role("option")).to_have_count(0)


def pick_and_load(page, name, path, loaded):
    """Pick ``name`` in the model picker (which fills the Model field with ``path``) and load it."""
    page.locator("#model-picker input").click()
    page.locator("#model-picker").get_by_role("option", name=f"{name} · ").click()
    expect(page.locator("#model-path").get_by_role("textbox")).to_have_value(path)
    page.locator("#load-btn").click()
    expect(page.locator("#model-status")).to_contain_text(loaded)


def test_the_model_picker_lists_and_loads_the_models_on_this_machine(page, models_folder):
    gguf, vision = models_folder / "gguf" / "SmolLM2-copy.gguf", models_folder / "tiny-qwen2-vl"
    open_tab(page, "Settings")
    options = picker_options(page)
    assert "● SmolLM2-135M-Instruct · embedded · GGUF · 93.8 MB · reads text" in options, "the model loaded is marked"
    assert "gguf/SmolLM2-copy · models folder · GGUF · 93.8 MB · reads text" in options
    assert any(re.fullmatch(r"tiny-qwen2-vl · models folder · HF · [\d.]+ KB · reads text, images, video", o) for o in options), options
    page.wait_for_timeout(500)  # the list fades in
    page.screenshot(path=str(ASSETS / "picker.png"))
    close_picker(page)

    pick_and_load(page, "gguf/SmolLM2-copy", str(gguf), f"Loaded {gguf.name} on {GGUF_BACKEND}")
    # The list is made again for the model loaded now.
    page.locator("#model-picker input").click()
    expect(page.locator("#model-picker").get_by_role("option", name="● gguf/SmolLM2-copy · models folder")).to_be_visible()
    expect(page.locator("#model-picker").get_by_role("option", name="● SmolLM2-135M-Instruct")).to_have_count(0)
    close_picker(page)
    set_number(page, "max-new-tokens", 12)
    open_tab(page, "Chat")
    ask(page, "Say hello.")
    check_stats(page, GGUF_BACKEND)

    open_tab(page, "Settings")
    pick_and_load(page, "tiny-qwen2-vl", str(vision), f"Loaded {vision.name} on huggingface")
    expect(page.locator("#model-status")).to_contain_text("Reads text, images")
    set_number(page, "max-new-tokens", 6)
    open_tab(page, "Chat")
    ask(page, "Say hello.")
    check_stats(page, "huggingface", rate_shown=False)

    # A Hub name, with HF_HUB_OFFLINE set as the tests run: refused at once, the model kept.
    open_tab(page, "Settings")
    page.locator("#model-path").get_by_role("textbox").fill("HuggingFaceTB/SmolLM2-360M-Instruct")
    page.locator("#load-btn").click()
    status = page.locator("#model-status")
    expect(status).to_contain_text("HuggingFaceTB/SmolLM2-360M-Instruct is not on this machine", timeout=15_000)
    expect(status).to_contain_text("unset HF_HUB_OFFLINE and load it again")
    expect(status).to_contain_text(f"Loaded {vision.name} on huggingface")

    # Rescan finds what was put there since the page opened. (Not checked absent before: the list
    # is made again as the status changes, and the refused load's change may land after the file.)
    (models_folder / "later.gguf").symlink_to(default_gguf())
    page.locator("#rescan-models").click()
    page.locator("#model-picker input").click()
    expect(page.locator("#model-picker").get_by_role("option", name="later · models folder · GGUF · 93.8 MB · reads text")).to_be_visible()
    close_picker(page)

    pick_and_load(page, "SmolLM2-135M-Instruct", "", "Loaded SmolLM2-135M-Instruct (embedded) on")


def test_an_open_page_that_waits_draws_few_frames(app, browser):
    """Gradio 6.31 leaves a status timer's animation-frame loop running on every page it serves, 60
    frames a second for as long as the page is open (webui/gradio_patches/idle_frames.py runs it at ten)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        # Counts every frame the page asks for, from before Gradio's scripts and the page's own run.
        context.add_init_script("""(() => {
            window.framesAsked = 0;
            const frame = window.requestAnimationFrame.bind(window);
            window.requestAnimationFrame = (callback) => { window.framesAsked++; return frame(callback); };
        })()""")
        page = context.new_page()
        open_chat(page, app.url)
        time.sleep(5)  # past what the page draws as it opens
        before, started = page.evaluate("window.framesAsked"), time.monotonic()
        time.sleep(5)
        per_second = (page.evaluate("window.framesAsked") - before) / (time.monotonic() - started)
        assert per_second < 20, f"the waiting page asked for {per_second:.0f} frames a second"
    finally:
        context.close()


def test_a_streamed_reply_pushes_only_the_statuses_that_changed(app, browser):
    """Gradio 6.31 pushes every component's loading status again on every message of every event,
    a deep copy of each one's props each time (webui/gradio_patches/status_pushes.py serves it pushing changes
    only). Counted as the copies the page makes per update of a streamed reply of 200 tokens:
    140-180 with the changes pushed, 1,400 with every status (this page's 60 or so components have
    one). A reply gets at most ten updates a second, so 15 or more here on any machine."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        # Counts the page's deep copies (Svelte's snapshots use structuredClone), from before Gradio's scripts run.
        context.add_init_script("""(() => {
            window.copies = 0;
            const copy = window.structuredClone;
            window.structuredClone = (...args) => { window.copies++; return copy(...args); };
        })()""")
        page = context.new_page()
        open_chat(page, app.url)
        open_tab(page, "Settings")
        set_number(page, "temperature", 0)  # greedy: the numbers go on to the last token
        set_number(page, "max-new-tokens", 200)
        open_tab(page, "Chat")
        page.evaluate(WATCH_REPLY)
        before = page.evaluate("window.copies")
        ask(page, "Write the numbers from 1 to 1000, separated by commas.")
        copies = page.evaluate("window.copies") - before
        shown = page.evaluate("window.shown")
        _, count, reply = next(entry for entry in reversed(shown) if entry[2])
        updates = len({text for _, shown_count, text in shown if shown_count == count and text})
        assert copies / updates < 800, f"{copies} copies for {updates} updates of the reply {reply!r}"
    finally:
        context.close()


def test_gradio_client_streams_the_chat_endpoint(app):
    from gradio_client import Client

    def chat(client, text):
        # The endpoint's parameters are the page's controls, by the settings' own names.
        greedy = dict(system="", tools="", temperature=0, max_new_tokens=24, seed=None)
        job = client.submit({"text": text, "files": []}, api_name="/chat", **greedy)
        updates = [chatbot for chatbot, *_ in job]
        return updates, updates[-1]

    def messages(chatbot):
        """(role, text) of each message but the stats lines, whose timings differ from run to run."""
        texts = [(m["role"], m["content"][0]["text"]) for m in chatbot]
        return [(role, text) for role, text in texts if "reply-stats" not in text]

    first, second = Client(app.url, verbose=False), Client(app.url, verbose=False)
    updates, final = chat(first, "Name a fruit.")
    replies = [messages(chatbot)[-1][1] for chatbot in updates if messages(chatbot)[-1][0] == "assistant"]
    # Streamed: a part of the reply came before the whole. (How many parts depends on the machine:
    # the page's updates are spaced further apart while each takes the server longer, and beside a
    # busy process a 24-token reply came as its first word, then whole.)
    assert len(replies[0]) < len(replies[-1]), f"the endpoint did not stream: {replies}"
    assert all(replies[-1].startswith(reply.rstrip()) for reply in replies)
    assert [role for role, _ in messages(final)] == ["user", "assistant"]
    assert "tokens/s" in final[-1]["content"][0]["text"], "the finished reply has no stats line"

    _, other = chat(second, "Name a fruit.")
    assert messages(other) == messages(final), "the same greedy request gave another reply in another session"
    _, followed = chat(first, "And a vegetable?")
    assert [text for role, text in messages(followed) if role == "user"] == ["Name a fruit.", "And a vegetable?"]


def test_no_request_left_this_machine(requests_seen):
    assert requests_seen, "no requests were recorded"
    outside = sorted({url for url in requests_seen if not is_local(url)})
    assert not outside, f"the page fetched from outside localhost: {outside}"


def draw_picture(path):
    image = Image.new("RGB", (320, 200), (255, 170, 90))
    draw = ImageDraw.Draw(image)
    for band, color in enumerate([(255, 120, 80), (230, 90, 90), (120, 70, 120), (40, 50, 100)]):
        draw.rectangle([0, 120 + band * 20, 320, 140 + band * 20], fill=color)
    draw.ellipse([120, 60, 200, 140], fill=(255, 230, 120))
    image.save(path)
