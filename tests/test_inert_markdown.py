"""Reply text's raw HTML shown as text, its Markdown and code as they were (webui/inert_markdown.py);
what Chromium then renders of a hostile reply: tests/test_security_access.py."""

import pytest

from webui.inert_markdown import as_written, inert


@pytest.mark.parametrize(("written", "shown"), [
    ("Hello <b>x</b>, `<div>` and a < b", "Hello &#60;b>x&#60;/b>, `<div>` and a < b"),
    ("```python\nif a<b: print('<x>')\n```\n<div style='position:fixed'>x</div>", "```python\nif a<b: print('<x>')\n```\n&#60;div style='position:fixed'>x&#60;/div>"),
    ("- item\n\n    ```html\n    <b>x</b>\n    ```", "- item\n\n    ```html\n    <b>x</b>\n    ```"),
    ("<!-- c --> <?x?> <![CDATA[x]]>", "&#60;!-- c --> &#60;?x?> &#60;![CDATA[x]]>"),
    ("<https://example.com> <javascript:alert(1)>", "<https://example.com> &#60;javascript:alert(1)>"),
    # Where the page's renderer could read no code span, none is read here either.
    ("| a | b |\n|---|---|\n| `x | <img src=x>` | y |", "| a | b |\n|---|---|\n| `x | &#60;img src=x>` | y |"),
    ("\\`<img src=x>\\`", "\\`&#60;img src=x>\\`"),
    ("`foo\n<img>`", "`foo\n&#60;img>`"),
])
def test_html_outside_code_is_shown_as_text(written, shown):
    assert inert(written) == shown
    assert as_written(inert(written)) == written
