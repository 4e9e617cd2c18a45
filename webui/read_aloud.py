"""Read aloud: a button beside each finished reply reads it with the browser's own speech
synthesis (offline: nothing leaves the browser), and stops it when pressed again. Replies being
written get theirs when they finish; one reply is read at a time."""

from .languages.catalog import script_words

# Plain symbols (▶ ■ in the catalog's words): an emoji needs a colour font that not every system has.
WORDS = script_words("chat.read_aloud", "chat.stop_reading")

# Runs once as the page loads (demo.load's js). A finished reply is the one with its stats line;
# the button goes beside that line, and what it reads is the reply's text without its thinking,
# tool calls or stats.
READ_ALOUD = """() => {
    if (!("speechSynthesis" in window)) return;
    const words = %s, READ = words["chat.read_aloud"], STOP = words["chat.stop_reading"];
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
}""" % WORDS
