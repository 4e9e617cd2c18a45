"""‹2/3› under a message that has other versions (an earlier reply regenerated, an earlier
message edited): its arrows show the version before or after it.

The line is HTML in the Chatbot, which sanitizes away scripts and handlers but keeps classes:
each arrow names the message it shows in a class (``v-<place>``: its place in the tab's
MessageTree), and a script the page runs once puts that place into a hidden field (with the
time, so that each click changes it), whose change event shows that version."""

from __future__ import annotations

from typing import Any

from .languages import said

PICK_ID = "version-pick"


def version_line(place: int, versions: list[int]) -> dict[str, Any] | None:
    """The Chatbot message that shows which of ``versions`` (places) the message at ``place`` is
    (None where it has no other)."""
    if len(versions) < 2:
        return None
    at = versions.index(place)

    def arrow(symbol: str, target: int) -> str:
        if 0 <= target < len(versions):
            shown = said("conversation.show_version", number=target + 1)
            return f'<span class="version-go v-{versions[target]}" title="{shown}">{symbol}</span>'
        return f'<span class="version-end">{symbol}</span>'

    return {"role": "assistant", "content": f'<span class="versions">{arrow("‹", at - 1)} {at + 1}/{len(versions)} {arrow("›", at + 1)}</span>'}


def picked(value: Any) -> int | None:
    """The message place the hidden field names, before its time (None for anything else)."""
    text = (str(value or "").split() or [""])[0]
    return int(text) if text.isdigit() and len(text) < 19 else None


# Runs once as the page loads (demo.load's js).
VERSION_ARROWS = """() => {
    document.addEventListener("click", (event) => {
        const arrow = event.target instanceof Element ? event.target.closest("#chatbot .version-go") : null;
        const field = document.querySelector("#%s textarea, #%s input");
        const name = arrow ? [...arrow.classList].find((name) => name.startsWith("v-")) : null;
        if (!name || !field) return;
        field.value = `${name.slice(2)} ${Date.now()}`;
        field.dispatchEvent(new Event("input", {bubbles: true}));
    });
}""" % (PICK_ID, PICK_ID)
