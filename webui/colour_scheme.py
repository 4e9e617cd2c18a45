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


def with_colour_scheme(page: bytes, content_type: str) -> bytes:
    """The page's HTML with EARLY_SCRIPT first in its head."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(b"<head>", b"<head>" + EARLY_SCRIPT, 1)


def scheme_choices() -> list[tuple[str, str]]:
    """Each scheme in the page's language (Gradio translates no choice's label)."""
    return [(said(f"scheme.{scheme}"), scheme) for scheme in SCHEMES]


def colour_scheme_choice(demo: gr.Blocks) -> gr.Radio:
    """The choice of scheme, showing this browser's as the page opens; a choice applies at once,
    in the browser alone (nothing goes to the server)."""
    choice = gr.Radio(scheme_choices(), value="system", label=text("scheme.label"), elem_id="colour-scheme")
    kept = "() => window.anychatColourScheme ? window.anychatColourScheme.chosen() : 'system'"
    demo.load(lambda scheme: gr.update(choices=scheme_choices(), value=scheme if scheme in SCHEMES else "system"), choice, choice,
              js=kept, queue=False, api_visibility="private")
    # .input: a choice of the user's, not the load's setting of it.
    choice.input(None, choice, None, js="(scheme) => { window.anychatColourScheme && window.anychatColourScheme.choose(scheme); }",
                 queue=False, api_visibility="private")
    return choice
