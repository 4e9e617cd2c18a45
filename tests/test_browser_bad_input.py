"""Bad input that only a browser shows, in a real headless Chromium against the app of `python
app.py` (like tests/test_browser.py, whose browser and page fixtures this module shares, on an app
of its own with a small upload limit, served in the test process: harness/app_in_process.py): a
giant paste, invalid tools JSON, an invalid reply schema (and a valid one holding the reply),
broken conversation files imported with the Import button, and a corrupt image and one over the
upload limit attached for a multimodal model. Each shows a clear message and leaves the conversation as it was. The same kinds
and many more are checked on the handlers in tests/test_page_bad_input.py.
"""

import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from PIL import Image

from harness.app_in_process import AppInProcess
from harness.browser import CHROMIUM, ask, bot_messages, load_model, open_tab, set_number, user_messages
from harness.reply_schemas import SCHEMAS

pytestmark = [pytest.mark.browser, pytest.mark.server]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)

REFUSED = "The model could not answer"
UPLOAD_LIMIT = "1mb"
STACK_TRACE = re.compile(r'Traceback|File "')


@pytest.fixture(scope="module")
def app(tmp_path_factory, models_folder):
    """test_browser's app, with a small upload limit (--max-upload-size) to show what a larger file gets."""
    process = AppInProcess(tmp_path_factory.mktemp("app"), ("--models-dir", str(models_folder), "--max-upload-size", UPLOAD_LIMIT))
    yield process
    process.stop()


def start_chat(page, first="Name a color."):
    """A short exchange that every bad input must leave as it was."""
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 6)
    open_tab(page, "Chat")
    ask(page, first)
    expect(bot_messages(page)).to_have_count(1)
    return bot_messages(page).first.inner_text()


def still_there(page, first, reply, users):
    """The first exchange is unchanged, ``users`` messages are shown, nothing shows a stack trace,
    and the model answers the next message."""
    expect(user_messages(page)).to_have_count(users)
    expect(user_messages(page).first).to_contain_text(first)
    assert bot_messages(page).first.inner_text() == reply
    assert not STACK_TRACE.search(page.locator("body").inner_text())
    ask(page, "Say yes.")
    expect(user_messages(page)).to_have_count(users + 1)
    expect(bot_messages(page).last).not_to_contain_text(REFUSED)
    assert bot_messages(page).last.inner_text().strip(), "no reply after the bad input"


def test_a_giant_paste_is_refused_under_the_message(page):
    reply = start_chat(page)
    paste = "Please summarise this log: " + "error at line 42 in module x; " * 2000  # 60,000 characters
    box = page.locator("#chat-input textarea")
    box.fill(paste)
    box.press("Enter")
    refusal = bot_messages(page).last
    expect(refusal).to_contain_text(REFUSED)
    expect(refusal).to_contain_text(re.compile(r"The conversation is \d+ tokens long, more than this model's limit of \d+ tokens"))
    expect(refusal).to_contain_text("Start a new chat, shorten or remove earlier messages")
    expect(user_messages(page).last).to_contain_text("Please summarise this log: error at line 42")
    still_there(page, "Name a color.", reply, users=2)


def test_invalid_tools_json_is_named_under_the_message(page):
    reply = start_chat(page)
    page.get_by_text("Tools", exact=True).click()
    page.locator("#tools textarea").fill('[{"type": "function", "function": {"name": "get_weather"')
    ask(page, "Weather in Oslo?")
    expect(bot_messages(page).last).to_contain_text(REFUSED)
    expect(bot_messages(page).last).to_contain_text(re.compile(r"Tools are not valid JSON \(.+ at line 1 column \d+\)"))
    expect(user_messages(page).last).to_contain_text("Weather in Oslo?")
    page.locator("#tools textarea").fill("")
    still_there(page, "Name a color.", reply, users=2)


def test_a_reply_format_holds_the_reply_and_a_bad_schema_is_named(page):
    reply = start_chat(page)
    page.get_by_text("Reply format", exact=True).click()
    page.locator("#reply-format input").click()
    page.get_by_role("option", name="json_schema").click()
    page.locator("#reply-schema textarea").fill('{"type": "object", "properties": ')
    ask(page, "Describe a person.")
    expect(bot_messages(page).last).to_contain_text(REFUSED)
    expect(bot_messages(page).last).to_contain_text(re.compile(r"The JSON schema is not valid JSON \(.+ at line 1 column \d+\)"))
    expect(user_messages(page).last).to_contain_text("Describe a person.")

    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 160)
    open_tab(page, "Chat")
    page.locator("#reply-schema textarea").fill(json.dumps(SCHEMAS["person"]))
    ask(page, "Describe a person.")
    jsonschema.validate(json.loads(bot_messages(page).last.inner_text()), SCHEMAS["person"])

    page.locator("#reply-format input").click()
    page.get_by_role("option", name="text").click()
    still_there(page, "Name a color.", reply, users=3)


@pytest.mark.parametrize(("content", "says"), [
    (b"Hello, this is my chat {", "it is not JSON text"),
    (b'{"turns": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "it is nested too deeply"),
    (b'{"turns": [{"role": "user", "content": "hi", "files": ["/etc/passwd"]}]}', "exported by an older version of anychat"),
], ids=["not JSON", "deeply nested", "server path"])
def test_a_broken_conversation_file_shows_a_toast_and_the_chat_stays(page, tmp_path, content, says):
    reply = start_chat(page)
    broken = tmp_path / "broken.json"
    broken.write_bytes(content)
    page.get_by_text("Conversation file", exact=True).click()
    with page.expect_file_chooser() as chooser:
        page.locator("#import-btn").click()
    chooser.value.set_files(str(broken))
    toast = page.get_by_test_id("toast-body").filter(has_text="Could not import broken.json")
    expect(toast).to_be_visible()
    expect(toast).to_contain_text(f"This is not an anychat conversation file: {says}" if "older" not in says else says)
    assert not STACK_TRACE.search(toast.inner_text())
    still_there(page, "Name a color.", reply, users=1)


def test_a_corrupt_or_huge_image_for_a_multimodal_model_is_named(page, tiny_vision_model, tmp_path):
    load_model(page, str(tiny_vision_model), f"Loaded {tiny_vision_model.name} on huggingface")
    try:
        reply = start_chat(page, "Say hello.")
        corrupt = tmp_path / "holiday.png"
        corrupt.write_bytes(b"\x89PNG\r\n\x1a\n but the rest is not a picture " * 20)
        page.locator("#chat-input input[type=file]").set_input_files(str(corrupt))
        ask(page, "What is in this picture?")
        refusal = bot_messages(page).last
        expect(refusal).to_contain_text(REFUSED)
        expect(refusal).to_contain_text("The image 1 (holiday.png) is not an image this app can read. Send a PNG, JPEG")
        expect(user_messages(page).last).to_contain_text("What is in this picture?")
        # The Chatbot shows each part of a message (the image, the text) as its own element.
        expect(page.locator("#chatbot [data-testid=user] img")).to_have_count(1)
        still_there(page, "Say hello.", reply, users=3)

        # A file over the page's upload limit is refused by the page itself, before it is sent.
        huge = tmp_path / "panorama.png"
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (800, 800, 3), dtype=np.uint8)).save(huge)
        page.locator("#chat-input input[type=file]").set_input_files(str(huge))
        toast = page.get_by_test_id("toast-body").filter(has_text="panorama.png")
        expect(toast).to_contain_text('File(s) exceed the maximum allowed size of 1.0 Mb: "panorama.png"')
        expect(page.locator("#chat-input img")).to_have_count(0)
        expect(user_messages(page)).to_have_count(4)
        expect(user_messages(page).first).to_contain_text("Say hello.")
    finally:
        load_model(page, "", "Loaded SmolLM2-135M-Instruct (embedded) on")
