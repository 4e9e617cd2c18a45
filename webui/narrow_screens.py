"""The page on a phone: the chat and its controls within the first screen.

On a screen narrower than a tablet, Gradio's sidebar opens over the whole chat: there it starts
closed, and choosing a chat (or a new one) closes it again, so that the chat shows; the chat's
height leaves the message box and its buttons in the first screen, and the buttons are large
enough for a finger."""

from __future__ import annotations

# On a phone the chat takes the window less what is above it (title, tabs) and below it (message
# box, touch-sized buttons). (!important: over the height Gradio sets on the element itself.)
NARROW_CSS = """
@media (max-width: 767px) {
    #chatbot { height: max(14rem, calc(100dvh - 25rem)) !important; }
    #chat-buttons { gap: 0.4rem; }
    #chat-buttons button { min-height: 44px; white-space: nowrap; flex: 1 1 auto !important; min-width: max-content !important; padding-inline: 0.3rem !important; }
}
"""

NARROW_SIDEBAR = """
() => {
    const narrow = window.matchMedia("(max-width: 767px)");
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
"""
