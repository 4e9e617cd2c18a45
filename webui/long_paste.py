"""A long paste into the message box becomes a text attachment (as in llama.cpp's web UI), so
the box stays usable: the text reaches the model whole, as a document named pasted-text-N.txt."""

# Over this many characters a paste is attached rather than typed in.
LONG_PASTE_CHARACTERS = 4000

# Runs once as the page loads (demo.load's js). It listens before the box does, and hands the
# text to the box's own file input, so the upload is Gradio's, within the upload limit.
LONG_PASTE_ATTACHES = """() => {
    let pasted = 0;
    document.addEventListener("paste", (event) => {
        const box = event.target instanceof Element ? event.target.closest("#chat-input") : null;
        const text = event.clipboardData ? event.clipboardData.getData("text/plain") : "";
        const input = box ? box.querySelector("input[type=file]") : null;
        if (!input || text.length <= %d) return;
        event.preventDefault();
        event.stopPropagation();
        pasted += 1;
        const files = new DataTransfer();
        files.items.add(new File([text], `pasted-text-${pasted}.txt`, {type: "text/plain"}));
        input.files = files.files;
        input.dispatchEvent(new Event("change", {bubbles: true}));
    }, true);
}""" % LONG_PASTE_CHARACTERS
