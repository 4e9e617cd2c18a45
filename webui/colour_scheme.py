"""Light, dark, or the system's: chosen in the page, kept in the browser (localStorage).

Gradio 6.31 decides the scheme once, as the page starts (a ``?__theme=`` in its address, else
the system's), by the ``dark`` class on the body, and follows the system's changes after. The
choice kept here holds over both: a script in the page's HTML, ahead of Gradio's own, sets the
class the moment the body exists and sets it back whenever Gradio changes it (a MutationObserver
runs before the browser draws, so the other scheme never shows). A ``?__theme=`` in the address
still wins for that visit.
"""

from __future__ import annotations

import gradio as gr

from .languages.catalog import said, text

STORAGE_KEY = "anychat-colour-scheme"
SCHEMES = ("system", "light", "dark")

EARLY_SCRIPT = b"""<script>
(() => {
    const KEY = "%s";
    const named = new URL(location.href).searchParams.get("__theme");
    const chosen = () => localStorage.getItem(KEY) || "system";
    const system = matchMedia("(prefers-color-scheme: dark)");
    const dark = () => (named || chosen()) === "dark" || ((named || chosen()) === "system" && system.matches);
    const apply = () => {
        if (!document.body) return;
        const wanted = dark();
        if (document.body.classList.contains("dark") !== wanted) document.body.classList.toggle("dark", wanted);
        document.documentElement.style.colorScheme = wanted ? "dark" : "light";
    };
    window.anychatColourScheme = {
        chosen,
        choose(scheme) { localStorage.setItem(KEY, scheme); apply(); },
    };
    system.addEventListener("change", apply);
    document.addEventListener("DOMContentLoaded", () => {
        apply();
        new MutationObserver(apply).observe(document.body, { attributes: true, attributeFilter: ["class"] });
    });
})();
</script>""" % STORAGE_KEY.encode()


# Messages at full strength: Gradio 6.31 draws every message's text at 80 % opacity, which takes
# coloured text under the contrast it needs. And code in replies, light: Gradio's Prism colours
# there (strings #690, punctuation #999, functions #dd4a68, ...) are 2.3 to 3.9 times darker than
# the code's background, under the 4.5 that text needs (axe-core's colour-contrast); these are the
# same hues at 5 or more. Gradio's dark ones pass as they are.
MESSAGE_COLOURS_CSS = """
#chatbot .message-wrap .prose.chatbot.md { opacity: 1; }
body:not(.dark) #chatbot .token:is(.comment, .prolog, .doctype, .cdata) { color: #5b6b79; }
body:not(.dark) #chatbot .token.punctuation { color: #4b5563; }
body:not(.dark) #chatbot .token:is(.property, .tag, .boolean, .number, .constant, .symbol, .deleted) { color: #990055; }
body:not(.dark) #chatbot .token:is(.selector, .attr-name, .string, .char, .builtin, .inserted) { color: #3d6b00; }
body:not(.dark) #chatbot .token:is(.atrule, .attr-value, .keyword) { color: #00658f; }
body:not(.dark) #chatbot .token:is(.function, .class-name) { color: #b3264a; }
body:not(.dark) #chatbot .token:is(.regex, .important, .variable) { color: #9a5b00; }
"""


def with_colour_scheme(page: bytes, content_type: str) -> bytes:
    """The page's HTML with EARLY_SCRIPT first in its head."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(b"<head>", b"<head>" + EARLY_SCRIPT, 1)


def scheme_choices() -> list[tuple[str, str]]:
    """Each scheme in the page's language (Gradio translates no choice's label)."""
    return [(said(f"scheme.{scheme}"), scheme) for scheme in SCHEMES]


def colour_scheme_choice(demo: gr.Blocks) -> gr.Radio:
    """The choice of scheme, showing this browser's as the page opens (a choice made in it is
    applied and kept by page_preferences.py)."""
    choice = gr.Radio(scheme_choices(), value="system", label=text("scheme.label"), elem_id="colour-scheme")
    kept = "() => window.anychatColourScheme ? window.anychatColourScheme.chosen() : 'system'"
    demo.load(lambda scheme: gr.update(choices=scheme_choices(), value=scheme if scheme in SCHEMES else "system"), choice, choice,
              js=kept, queue=False, api_visibility="private")
    return choice
