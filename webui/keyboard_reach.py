"""The chat's own controls for the keyboard and screen readers.

What the page's scripts make clickable inside the chat (the ‹ › version arrows, a tool call's Run
/ Deny choices) is text the chat renders, which Gradio's sanitiser keeps to plain spans: here each
becomes a button for the keyboard and a screen reader (focusable, role=button, named, Enter and
Space click it). And the title of a collapsed tool call or thought, Gradio 6.31's own button, holds
a second, nameless button (its arrow), a button inside a button that a screen reader announces
twice and the keyboard stops on twice: the arrow is taken out of both (disabled, and left to the title by KEYBOARD_REACH_CSS for
a click), the title still opens it. Code blocks and tables, which scroll sideways inside a
message when wider than it (window_sizes.py), take the focus, so that the arrow keys scroll them.
"""

from __future__ import annotations

KEYBOARD_CLICKABLE = "#chatbot .version-go, #chatbot .tool-approval [class*=approve-]"
INNER_ARROWS = "#chatbot .title[role=button] button"
SCROLLING = "#chatbot pre:has(> code), #chatbot table"

# Runs once as the page loads (demo.load's js).
KEYBOARD_REACH = """() => {
    const chatbot = document.querySelector("#chatbot");
    if (!chatbot) return;
    const reachable = () => {
        chatbot.querySelectorAll(`CLICKABLE`).forEach((element) => {
            if (element.hasAttribute("tabindex")) return;
            element.setAttribute("tabindex", "0");
            element.setAttribute("role", "button");
            if (!element.hasAttribute("aria-label") && element.title) element.setAttribute("aria-label", element.title);
        });
        chatbot.querySelectorAll(`SCROLLING`).forEach((element) => {
            if (!element.hasAttribute("tabindex")) element.setAttribute("tabindex", "0");
        });
        chatbot.querySelectorAll(`ARROWS`).forEach((arrow) => {
            if (arrow.disabled) return;
            arrow.disabled = true;
            arrow.setAttribute("aria-hidden", "true");
        });
    };
    reachable();
    new MutationObserver(reachable).observe(chatbot, { subtree: true, childList: true });
    chatbot.addEventListener("keydown", (event) => {
        if ((event.key === "Enter" || event.key === " ") && event.target instanceof Element && event.target.matches(`CLICKABLE`)) {
            event.preventDefault();
            event.target.click();
        }
    });
}""".replace("CLICKABLE", KEYBOARD_CLICKABLE).replace("ARROWS", INNER_ARROWS).replace("SCROLLING", SCROLLING)

# A click on the disabled arrow goes to the title under it, which opens the call.
KEYBOARD_REACH_CSS = """
#chatbot .title[role=button] button { pointer-events: none; }
"""
