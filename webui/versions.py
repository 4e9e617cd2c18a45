"""‹2/3› under a message that has other versions (an earlier reply regenerated, an earlier
message edited): its arrows show the version before or after it.

The line is HTML in the Chatbot, which sanitizes away scripts and handlers but keeps classes:
each arrow names the message it shows in a class (``v-<place>``: its place in the tab's
MessageTree), which the page's bridge (webui/page_bridge.py) sends when it is clicked."""

from __future__ import annotations

from typing import Any

from .languages import said

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
    """The message place an arrow sent (None for anything else)."""
    text = str(value or "").strip()
    return int(text) if text.isdigit() and len(text) < 19 else None


# A click of an arrow, for the page's bridge (webui/page_bridge.py): the place of the version it shows.
ARROW_CLICK = ("#chatbot .version-go", "(arrow) => [...arrow.classList].find((name) => name.startsWith('v-'))?.slice(2) ?? null")
