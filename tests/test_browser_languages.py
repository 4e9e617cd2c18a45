"""The page's languages in a real headless Chromium against `python app.py` (like
tests/test_browser.py): the page speaks the browser's language (Chinese for a browser that asks
for zh-CN), and a language chosen in Settings instead, kept in this browser across reloads; its
own words, Gradio's and those the server writes as it runs (the status, the box's placeholder)."""

import re
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.server]  # AppProcess in tests, beside the `app` fixture
ASSETS = ROOT / "assets"
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)


@pytest.fixture
def chinese_browser(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    yield context
    context.close()


def choose_language(page, name):
    page.locator("#page-language input[role=combobox]").click()
    with page.expect_navigation():  # a choice reloads the page
        page.get_by_role("option", name=name, exact=True).click()


def test_the_page_in_chinese_when_the_browser_asks_for_it_and_in_french_when_chosen(app, chinese_browser):
    page = chinese_browser.new_page()
    page.goto(app.url)
    # Gradio's own locale, which its own words (the upload box, "Loading…") follow.
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    # Written by the browser from the page's catalog.
    expect(page.get_by_role("tab", name="对话")).to_be_visible()
    expect(page.get_by_role("button", name="↻ 重新生成")).to_be_visible()
    expect(page.locator("#system-prompt textarea")).to_have_attribute("placeholder", "你是一个乐于助人的助手。")
    # Written by the server as the page opens, in the language the page told it.
    expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile("此模型只读文本"))
    expect(page.locator("#saved-chats-note")).to_contain_text("保存在服务器上")
    page.get_by_role("tab", name="设置").click()
    expect(page.locator("#model-status")).to_contain_text("可读取文本")
    expect(page.get_by_label("Temperature（0 = 贪心解码）").first).to_be_visible()
    expect(page.locator("#page-language input[role=combobox]")).to_have_value("跟随浏览器")
    expect(page.locator("#colour-scheme")).to_contain_text("跟随系统")
    page.get_by_role("tab", name="对话").click()
    page.keyboard.press("?")
    expect(page.locator("#shortcuts-help")).to_contain_text("发送消息")
    page.keyboard.press("Escape")
    page.screenshot(path=str(ASSETS / "chinese.png"))
    page.get_by_role("tab", name="设置").click()

    choose_language(page, "Français")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    expect(page.get_by_role("tab", name="Paramètres")).to_be_visible()
    expect(page.get_by_role("button", name="↻ Régénérer")).to_be_visible()
    expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile("ne lit que du texte"))
    expect(page.get_by_role("tab", name="设置")).to_have_count(0)

    # Kept in this browser: another tab of it opens in French too.
    other = chinese_browser.new_page()
    other.goto(app.url)
    expect(other.get_by_role("tab", name="Paramètres")).to_be_visible()
    other.get_by_role("tab", name="Paramètres").click()
    expect(other.locator("#page-language input[role=combobox]")).to_have_value("Français")

    choose_language(other, "Celle du navigateur")
    expect(other.get_by_role("tab", name="设置")).to_be_visible()
