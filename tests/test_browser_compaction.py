"""A chat that outgrows the model's context, in Chromium on the real page: it goes on, the
summary shown as a message marked as one (the user's to edit), the messages it replaced one arrow
away (‹1/2›), the chat going on after it (Continue and Regenerate too), kept across a reload, in
the exported file, and read back by an import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.browser import ask, bot_messages, click_and_wait, import_conversation, open_tab, set_number, wait_until_ready

pytestmark = [pytest.mark.browser, pytest.mark.slow]
expect = pytest.importorskip("playwright.sync_api").expect

# A small context, so that a few long messages pass it.
APP_FLAGS = ("--max-model-len", "1024")


def long_message(number: int) -> str:
    return f"Note {number}: " + " ".join(f"the lighthouse keeper logged ship {number}-{i} passing the rocks at dawn." for i in range(16))


def test_a_chat_past_the_context_is_compacted_in_the_open_kept_exported_and_undone(page, tmp_path):
    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", 16)
    open_tab(page, "Chat")
    summary = page.locator("#chatbot .chat-summary")
    for number in range(8):
        ask(page, long_message(number))
        expect(bot_messages(page).last).not_to_contain_text("could not answer")
        if summary.count():
            break
    expect(summary).to_have_count(1)
    expect(summary).to_contain_text(" earlier messages")
    expect(summary).to_contain_text("freed")
    texts = page.locator("#chatbot [data-testid=user]").all_inner_texts()
    assert texts[0].startswith("Note 0:"), "the first message stays"

    # The messages it replaced are the other version of the summary.
    # The arrow pressed from the keyboard: a click lands where the arrow was when the pointer moved,
    # and the chat, scrolled to the arrow, could still be scrolling to its newest message (a CI run
    # under load clicked beside it). Focus follows the arrow wherever it goes.
    versions = page.locator("#chatbot .versions")
    expect(versions).to_contain_text("2/2")
    versions.locator(".version-go").press("Enter")
    expect(versions).to_contain_text("1/2")
    expect(summary).to_have_count(0)
    expect(page.locator("#chatbot [data-testid=user]").filter(has_text="Note 1:")).to_have_count(1)
    versions.locator(".version-go").press("Enter")
    expect(summary).to_have_count(1)

    # The summary is the user's to edit: the edit is a new version of it, read from then on.
    # Gradio shows a turn's messages (here the summary and its ‹k/n› line) as one, with its buttons beside it.
    page.locator("#chatbot .message-row:has(.chat-summary)").hover()
    page.locator("#chatbot .message-row:has(.chat-summary) + .message-buttons").get_by_role("button", name="Edit").click()
    page.locator("#chatbot textarea.edit-textarea").first.fill("The keeper logged ships passing the rocks at dawn.")
    page.get_by_role("button", name="Submit").first.click()
    expect(bot_messages(page).filter(has=page.locator(".chat-summary"))).to_contain_text("The keeper logged ships passing the rocks at dawn.")
    expect(versions).to_contain_text("3/3")

    # The chat goes on from the summary (Continue too, after a reply cut short), and it is kept.
    open_tab(page, "Settings")
    set_number(page, "max-new-tokens", 4)
    open_tab(page, "Chat")
    ask(page, "Which ship passed last?")
    expect(bot_messages(page).last).not_to_contain_text("could not answer")
    expect(page.locator("#chatbot .reply-stats").last).to_contain_text("max_new_tokens reached")
    cut = bot_messages(page).last.inner_text().strip()
    click_and_wait(page, "continue-btn")
    longer = bot_messages(page).last.inner_text().strip()
    assert longer.startswith(cut) and len(longer) > len(cut), f"Continue after {cut!r} gave {longer!r}"
    page.reload()
    wait_until_ready(page)
    expect(page.locator("#chatbot .chat-summary")).to_have_count(1)

    page.get_by_text("Conversation file").click()
    page.locator("#export-btn").click()
    with page.expect_download() as download:
        page.locator("#export-file a").first.click()
    exported = json.loads(Path(download.value.path()).read_text())
    [kept] = [turn for turn in exported["turns"] if turn.get("summary")]
    assert kept["role"] == "assistant" and kept["summary"]["replaced"] > 0 and kept["content"]
    assert any(entry.get("message", {}).get("content", "").startswith("Note 1:") for entry in exported["tree"]), \
        "the replaced messages are in the file, off the branch shown"

    page.locator("#export-md-btn").click()
    with page.expect_download() as download:
        page.locator("#export-file a").first.click()
    markdown = Path(download.value.path()).read_text()
    assert f"## Summary of {kept['summary']['replaced']} earlier messages" in markdown and kept["content"].strip() in markdown

    page.locator("#new-chat-btn").click()
    imported = tmp_path / "compacted.json"
    imported.write_text(json.dumps(exported))
    import_conversation(page, str(imported))
    expect(page.locator("#chatbot .chat-summary")).to_have_count(1)
    click_and_wait(page, "regenerate-btn")
    expect(bot_messages(page).last).not_to_contain_text("could not answer")
