"""Keyboard shortcuts of the page, besides the message box's own (Enter sends, Shift+Enter is a
new line): Escape stops the reply being written, wherever the focus is."""

# Runs once as the page loads (demo.load's js); clicks Stop only while it is shown, so Escape
# still closes dropdowns and cancels edits the rest of the time.
ESCAPE_STOPS = """() => {
    document.addEventListener("keydown", (event) => {
        const stop = document.querySelector("#stop-btn");
        if (event.key === "Escape" && stop && stop.offsetParent !== null) {
            stop.click();
        }
    });
}"""
