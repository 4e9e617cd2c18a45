"""Keyboard shortcuts of the page, besides the message box's own (Enter sends, Shift+Enter is a
new line), and the dialog that lists them all, opened with ? (or its button under the chat)."""

from __future__ import annotations

import json

from .languages.catalog import script_words

# (keys, what they do: a key of the catalog), as the dialog lists them; a key the page handles is
# handled in SHORTCUTS.
LISTED = (
    ("Enter", "shortcuts.send"),
    ("Shift+Enter", "shortcuts.new_line"),
    ("Escape", "shortcuts.stop"),
    ("Shift+Escape", "shortcuts.to_box"),
    ("Ctrl+Shift+O", "shortcuts.new_chat"),
    ("Ctrl+Shift+S", "shortcuts.sidebar"),
    ("?", "shortcuts.list"),
    ("Tab, Shift+Tab", "shortcuts.move"),
)
# Each key by name, so that tests/test_page_languages.py finds them in the catalog.
WORDS = script_words("shortcuts.title", "shortcuts.close", "shortcuts.send", "shortcuts.new_line", "shortcuts.stop", "shortcuts.to_box",
                     "shortcuts.new_chat", "shortcuts.sidebar", "shortcuts.list", "shortcuts.move")

# Runs once as the page loads (demo.load's js). Escape clicks Stop only while it is shown, so it
# still closes dropdowns and cancels edits the rest of the time; ? is a character typed into a
# text field, so it opens the list only outside one. The list is a native modal <dialog>: it
# keeps the focus inside, and Escape closes it, giving the focus back to where it was.
SHORTCUTS = """() => {
    const listed = LISTED_JSON, words = WORDS;
    const dialog = document.createElement("dialog");
    dialog.id = "shortcuts-help";
    dialog.setAttribute("aria-labelledby", "shortcuts-help-title");
    dialog.innerHTML = '<h2 id="shortcuts-help-title"></h2><table><tbody></tbody></table><button type="button" class="shortcuts-close"></button>';
    dialog.querySelector("h2").textContent = words["shortcuts.title"];
    dialog.querySelector(".shortcuts-close").textContent = words["shortcuts.close"];
    const rows = dialog.querySelector("tbody");
    for (const [keys, what] of listed) {
        const row = rows.insertRow();
        const key = document.createElement("kbd");
        key.textContent = keys;
        row.insertCell().append(key);
        row.insertCell().textContent = words[what];
    }
    dialog.querySelector(".shortcuts-close").addEventListener("click", () => dialog.close());
    document.body.append(dialog);
    window.anychatShortcuts = () => dialog.open || dialog.showModal();

    const typing = (target) => target.closest("textarea, input, select, [contenteditable=true]") !== null;
    const click = (selector) => document.querySelector(selector)?.click();
    document.addEventListener("keydown", (event) => {
        if (dialog.open) return;
        const stop = document.querySelector("#stop-btn");
        const ctrlShift = (event.ctrlKey || event.metaKey) && event.shiftKey && !event.altKey;
        if (event.key === "Escape" && !event.shiftKey) {
            if (stop && stop.offsetParent !== null) stop.click();
            return;
        }
        if (event.key === "Escape") {
            document.querySelector("#chat-input textarea")?.focus();
        } else if (ctrlShift && event.code === "KeyO") {
            click("#new-chat-btn");
        } else if (ctrlShift && event.code === "KeyS") {
            click("#chats-sidebar .toggle-button");
        } else if (event.key === "?" && !event.ctrlKey && !event.metaKey && !event.altKey && !typing(event.target)) {
            window.anychatShortcuts();
        } else {
            return;
        }
        event.preventDefault();
    });
}""".replace("LISTED_JSON", json.dumps(LISTED)).replace("WORDS", WORDS)

SHORTCUTS_CSS = """
#shortcuts-help { border: 1px solid var(--border-color-primary); border-radius: 12px; padding: 1rem 1.4rem;
                  background: var(--background-fill-primary); color: var(--body-text-color); max-width: min(32rem, 92vw); }
#shortcuts-help::backdrop { background: rgb(0 0 0 / 0.4); }
#shortcuts-help h2 { margin-top: 0; font-size: 1.2rem; }
#shortcuts-help td { padding: 0.25rem 0.8rem 0.25rem 0; vertical-align: top; }
#shortcuts-help kbd { font-family: var(--font-mono); border: 1px solid var(--border-color-primary); border-radius: 4px; padding: 0 0.3rem; white-space: nowrap; }
#shortcuts-help .shortcuts-close { margin-top: 0.8rem; min-height: 44px; padding: 0 1rem; border-radius: 8px; cursor: pointer;
                                   border: 1px solid var(--border-color-primary); background: var(--button-secondary-background-fill); color: var(--body-text-color); }
"""
