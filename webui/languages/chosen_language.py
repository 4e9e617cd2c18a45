"""Which language the page speaks: the one chosen in the page (Settings, kept in this browser's
localStorage), else the first of the browser's languages the catalog has, else English.

Gradio 6.31 picks its locale once, from ``navigator.language``, as its page starts and before it
adds the page's head (``head=``); so the choice is made by a script in the page's HTML, ahead of
Gradio's own, which makes ``navigator.language`` and ``navigator.languages`` say the language
chosen. Gradio's own words (its upload box, its "Loading…") follow it too. The script also keeps
the choice in a cookie, which every request of the page carries: the server writes what it says
as the page runs (status lines, toasts) in that language (``language_of``).
"""

from __future__ import annotations

from typing import Any

from . import en, fr, zh_cn

# Each language's module: its CODE (as Gradio names its locales; a code outside Gradio's list
# falls back to English), its NAME in its own words, and its TEXT.
LANGUAGES = (en, zh_cn, fr)
ENGLISH = en.CODE
OFFERED = tuple(language.CODE for language in LANGUAGES)
STORAGE_KEY = "anychat-language"
COOKIE = "anychat-language"

LANGUAGE_SCRIPT = f"""<script>
(() => {{
    const offered = {list(OFFERED)!r};
    const chosen = localStorage.getItem("{STORAGE_KEY}");
    // A browser's zh-TW or fr-CA is closer to zh-CN or fr than to English.
    const match = (tag) => offered.find((code) => code.toLowerCase() === tag.toLowerCase())
        || offered.find((code) => code.split("-")[0] === tag.toLowerCase().split("-")[0]);
    const language = offered.includes(chosen) ? chosen
        : [...(navigator.languages || []), navigator.language].filter(Boolean).map(match).find(Boolean) || "{ENGLISH}";
    Object.defineProperty(navigator, "language", {{ get: () => language, configurable: true }});
    Object.defineProperty(navigator, "languages", {{ get: () => [language], configurable: true }});
    document.cookie = `{COOKIE}=${{language}}; path=/; SameSite=Lax`;
}})();
</script>""".encode()


def with_language_script(page: bytes, content_type: str) -> bytes:
    """The page (the HTML that Gradio answers ``GET /`` with) with LANGUAGE_SCRIPT first in its head."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(b"<head>", b"<head>" + LANGUAGE_SCRIPT, 1)


def language_of(request: Any) -> str:
    """The language of the page that sent ``request`` (a gr.Request, or None outside an event):
    its cookie, else the first language its Accept-Language names that the catalog has, else English."""
    if request is None:
        return ENGLISH
    chosen = (getattr(request, "cookies", None) or {}).get(COOKIE)
    if chosen in OFFERED:
        return chosen
    for tag in (request.headers.get("accept-language") or "").split(","):
        asked = tag.split(";")[0].strip().lower()
        for code in OFFERED:
            if asked and (asked == code.lower() or asked.split("-")[0] == code.split("-")[0]):
                return code
    return ENGLISH
