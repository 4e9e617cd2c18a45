"""Read aloud: a button beside each finished reply reads it with the browser's own speech
synthesis (offline: nothing leaves the browser), and stops it when pressed again. Replies being
written get theirs when they finish; one reply is read at a time."""

import json

# Plain symbols: an emoji needs a colour font that not every system has.
READ, STOP = "▶ Read aloud", "■ Stop reading"

# Runs once as the page loads (demo.load's js). A finished reply is the one with its stats line;
# the button goes beside that line, and what it reads is the reply's text without its thinking,
# tool calls or stats.
READ_ALOUD = """() => {
    if (!("speechSynthesis" in window)) return;
    const READ = %s, STOP = %s;
    let reading = null;
    const stop = () => {
        if (reading) reading.textContent = READ;
        reading = null;
        speechSynthesis.cancel();
    };
    const replyText = (row) => [...row.querySelectorAll("[data-testid=bot]")]
        .filter((message) => !message.querySelector(".reply-stats, .versions") && !message.closest(".thought-group, .thought"))
        .map((message) => message.innerText.trim()).filter(Boolean).join("\\n\\n");
    const read = (button, row) => {
        const again = reading === button;
        stop();
        if (again) return;
        const utterance = new SpeechSynthesisUtterance(replyText(row));
        utterance.onend = utterance.onerror = () => { if (reading === button) stop(); };
        reading = button;
        button.textContent = STOP;
        speechSynthesis.speak(utterance);
    };
    const addButtons = () => {
        for (const stats of document.querySelectorAll("#chatbot .bot-row .reply-stats")) {
            if (stats.parentElement.querySelector(".read-aloud")) continue;
            const row = stats.closest(".bot-row");
            const button = document.createElement("button");
            button.className = "read-aloud";
            button.type = "button";
            button.textContent = READ;
            button.addEventListener("click", () => read(button, row));
            stats.after(button);
        }
    };
    new MutationObserver(addButtons).observe(document.querySelector("#chatbot"), {childList: true, subtree: true});
    addButtons();
}""" % (json.dumps(READ), json.dumps(STOP))
