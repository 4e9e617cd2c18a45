"""The page on a phone or a laptop: the chat and its controls within the first screen.

On a screen narrower than a tablet, Gradio's sidebar opens over the whole chat: there it starts
closed, and choosing a chat (or a new one) closes it again, so that the chat shows, and the
buttons under the message box are large enough for a finger. The chat's height follows the
window's (CHATBOT_HEIGHT), so that its buttons stay above the fold of a 1280×720 laptop screen,
where a fixed share of the height pushed them below it."""

from __future__ import annotations

# The window less what is above the chat (title, tabs) and below it (message box, buttons): on a
# phone the title wraps and the buttons are touch-sized (44 px), so more is left for them.
CHATBOT_HEIGHT = "var(--chatbot-height)"
# (On the chat itself: Gradio scopes the page's CSS, and a :root rule within @media is lost.)
NARROW_CSS = """
#chatbot { --chatbot-height: max(16rem, calc(100dvh - 21rem)); }
@media (max-width: 767px) {
    #chatbot { --chatbot-height: max(14rem, calc(100dvh - 25rem)); }
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
