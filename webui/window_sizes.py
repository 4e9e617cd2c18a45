"""The page at every window size: the chat and all its controls within the first screen, from a
phone to a laptop, and nothing wider than the window.

Gradio's sidebar covers the whole page up to 768 px wide (a tablet held upright included): there
it starts closed, and choosing a chat (or a new one) closes it again, so that the chat shows. The
chat's height follows the window's, less what sits above it (title, tabs) and below it (message
box, buttons), so that Regenerate, Continue, Undo and Clear stay above the fold of a 1280×720
laptop screen, where a fixed share of the height pushed them below it. On a touch screen the
buttons are large enough for a finger, and the page shrinks with the on-screen keyboard
(``interactive-widget=resizes-content``), so that the box being typed in stays above it. Code and
tables wider than a message scroll inside it."""

from __future__ import annotations

# Gradio's own breakpoint for its full-width sidebar.
NARROW = "(max-width: 768px)"

# The chat's height is set with !important: over the one Gradio puts on the element itself.
# The messages' width is the chat's, whatever they hold (inline-size containment): else a code
# line or a table wider than the screen widened every box around it, and the page was laid out
# wider than the phone; within a message, code and tables scroll, and a table's cells keep their
# words whole instead of breaking them letter by letter to fit.
WINDOW_SIZES_CSS = """
#chatbot { height: max(16rem, calc(100dvh - 19rem)) !important; }
#chatbot .message-wrap { contain: inline-size; }
#chatbot pre, #chatbot table { max-width: 100%%; overflow-x: auto; }
#chatbot table { display: block; }
#chatbot th, #chatbot td { word-break: normal; overflow-wrap: normal; }
#chat-buttons button { white-space: nowrap; }
@media %(narrow)s {
    #chatbot { height: max(14rem, calc(100dvh - 25rem)) !important; }
    #chat-buttons { gap: 0.4rem; }
    #chat-buttons button { min-height: 44px; flex: 1 1 auto !important; min-width: max-content !important; padding-inline: 0.3rem !important; }
}
""" % {"narrow": NARROW}

NARROW_SIDEBAR = """
() => {
    const narrow = window.matchMedia("%s");
    const sidebar = document.querySelector("#chats-sidebar");
    if (!sidebar) return;
    const close = () => {
        if (narrow.matches && sidebar.classList.contains("open")) sidebar.querySelector(".toggle-button").click();
    };
    close();
    sidebar.addEventListener("click", (event) => {
        if (event.target.closest("#new-chat-btn, #chat-list label")) setTimeout(close, 150);
    });
}
""" % NARROW

GRADIO_VIEWPORT = b'content="width=device-width, initial-scale=1, shrink-to-fit=no"'
KEYBOARD_RESIZED_VIEWPORT = b'content="width=device-width, initial-scale=1, interactive-widget=resizes-content"'


def with_keyboard_resizing(page: bytes, content_type: str) -> bytes:
    """The page's viewport shrinking with a phone's on-screen keyboard, not sliding under it (the
    browsers' default), so that the chat's height, a share of the window's, leaves the message box
    in view while it is typed in."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(GRADIO_VIEWPORT, KEYBOARD_RESIZED_VIEWPORT, 1)
