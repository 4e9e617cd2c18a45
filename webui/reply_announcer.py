"""New reply text for screen readers, read out politely a sentence or more at a time.

Gradio's chatbot is a live log (role="log", aria-live="polite"): a screen reader would read each
of the hundreds of changes a streamed reply makes to it. Its log is kept quiet here, and a region
of the page's own says the reply instead: every few seconds while it is written, the sentences
finished since it last spoke, and the rest once the reply ends.
"""

from __future__ import annotations

SPEAK_EVERY_MS = 3000

# Runs once as the page loads (demo.load's js).
REPLY_ANNOUNCER = """() => {
    const region = document.createElement("div");
    region.id = "reply-announcer";
    region.className = "sr-only";
    region.setAttribute("role", "status");
    region.setAttribute("aria-live", "polite");
    document.body.append(region);
    const chatbot = document.querySelector("#chatbot");
    if (!chatbot) return;
    const quiet = () => chatbot.querySelectorAll("[aria-live]:not([aria-live=off])").forEach((live) => live.setAttribute("aria-live", "off"));
    quiet();
    new MutationObserver(quiet).observe(chatbot, { subtree: true, childList: true });

    const newest = () => {
        const replies = [...chatbot.querySelectorAll("[data-testid=bot]")].filter((m) => !m.querySelector(".reply-stats, .versions"));
        return replies.length ? replies[replies.length - 1].innerText : "";
    };
    let said = null;
    const speak = (whole) => {
        const text = newest();
        if (said === null || !text.startsWith(said)) said = "";
        let upTo = text.length;
        if (!whole) {
            const ends = [...text.slice(said.length).matchAll(/[.!?\\u3002\\uff01\\uff1f](\\s|$)|\\n/g)];
            if (!ends.length) return;
            const last = ends[ends.length - 1];
            upTo = said.length + last.index + last[0].length;
        }
        const part = text.slice(said.length, upTo).trim();
        said = text.slice(0, upTo);
        if (part) region.textContent = part;
    };
    let timer = null;
    new MutationObserver(() => {
        const writing = document.querySelector("#stop-btn") !== null;
        if (writing && timer === null) {
            said = newest();
            timer = setInterval(() => speak(false), SPEAK_EVERY_MS);
        } else if (!writing && timer !== null) {
            clearInterval(timer);
            timer = null;
            speak(true);
        }
    }).observe(document.body, { subtree: true, childList: true });
}""".replace("SPEAK_EVERY_MS", str(SPEAK_EVERY_MS))
