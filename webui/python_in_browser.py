"""Python run in the user's own browser (Pyodide, served by the app from its npm package, which
setup.sh fetches into .cache/pyodide): a ▶ Run button under each Python code block of a reply
runs the block and shows what it printed, as text, under the block. Nothing runs on the server; a
run that takes longer than RUN_SECONDS is ended with its interpreter.

The interpreter holds nothing of the user's: it runs in a Web Worker inside an
``<iframe sandbox="allow-scripts">``, whose origin is opaque, so that code a reply wrote cannot
use the page's login (its requests carry no cookies, and this server refuses those of Origin
null), read the page or reach the page's controls. Its files come from a path of this process's
own (PYODIDE_PATH), which only the page's config names, and Gradio gives that to a login only:
the sandbox fetches without cookies, so the path is its key. Only what loadPyodide fetches is
served there.

What runs is what the user sees: reply text reaches the page with its HTML made inert
(webui/inert_markdown.py), so no markup can hide lines in a block, and code holding characters
that reorder how it reads (Trojan Source) is not run.

The model's ``python`` tool runs the same way (chat/browser_python.py): when the user presses ▶ Run
under the code of a call that waits, the page's script sends what it printed, with the code's key,
through the page's bridge (webui/page_bridge.py) to the call."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from .languages.catalog import script_words

PYODIDE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "pyodide"
PYODIDE_PREFIX = "/pyodide/"
PYODIDE_PATH = f"{PYODIDE_PREFIX}{secrets.token_urlsafe(16)}/"
# What loadPyodide fetches, and their types (its dynamic import is refused a script of another type).
# The package's REPL pages, type declarations and source maps are not served.
PYODIDE_FILES = {"pyodide.js": "text/javascript", "pyodide.asm.mjs": "text/javascript", "pyodide.asm.wasm": "application/wasm",
                 "python_stdlib.zip": "application/zip", "pyodide-lock.json": "application/json"}
RUN_SECONDS = 30


def serve_pyodide(app) -> None:
    """Pyodide's files at PYODIDE_PATH on ``app``, so that Python runs offline. Without them
    (setup.sh fetches them), the page's Run button says so. Any origin may read them: the sandbox
    that fetches them has none."""
    from starlette.responses import FileResponse, PlainTextResponse

    async def pyodide_file(request):
        name = request.path_params["name"]
        if name not in PYODIDE_FILES or not (PYODIDE_DIR / name).is_file():
            return PlainTextResponse("Not found", status_code=404)
        return FileResponse(PYODIDE_DIR / name, media_type=PYODIDE_FILES[name],
                            headers={"Access-Control-Allow-Origin": "*", "Cache-Control": "private, max-age=86400"})

    app.add_route(PYODIDE_PATH + "{name}", pyodide_file, methods=["GET", "HEAD"])


# The worker: loads the interpreter once, then runs each block it is sent, its prints gathered.
# PYODIDE_URL is put in as the page's own address (a worker made from a Blob has no base to take a path from).
WORKER = """
importScripts("PYODIDE_URLpyodide.js");
const ready = loadPyodide({ indexURL: "PYODIDE_URL" });
self.onmessage = async (event) => {
    const { id, code } = event.data;
    const pyodide = await ready;
    let output = "";
    pyodide.setStdout({ batched: (text) => { output += text + "\\n"; } });
    pyodide.setStderr({ batched: (text) => { output += text + "\\n"; } });
    try {
        const value = await pyodide.runPythonAsync(code);
        if (value !== undefined && value !== null) output += String(value) + "\\n";
        self.postMessage({ id, output });
    } catch (error) {
        self.postMessage({ id, output: output + String(error.message || error), failed: true });
    }
};
"""

# The sandboxed frame's document: it starts the worker and passes messages between it and the page.
# A classic worker: Chromium does not start a module worker from a Blob in an opaque origin.
SANDBOX = """<!doctype html><script type="module">
const worker = new Worker(URL.createObjectURL(new Blob([WORKER], { type: "text/javascript" })));
worker.onmessage = (event) => parent.postMessage(event.data, "*");
worker.onerror = (event) => parent.postMessage({ broken: event.message || "the interpreter did not load" }, "*");
self.addEventListener("message", (event) => { if (event.source === parent) worker.postMessage(event.data); });
</script>"""

# Code holding these reads in another order than it runs (bidirectional embeddings, overrides and isolates).
REORDERING = "[\\u202A-\\u202E\\u2066-\\u2069]"

# Runs once as the page loads (demo.load's js).
RUN_BUTTONS = """() => {
    const words = %(words)s;
    const SANDBOX = %(sandbox)s.replace("WORKER", () => JSON.stringify(%(worker)s.replaceAll("PYODIDE_URL", new URL("%(path)s", location.href).href)));
    let frame = null;
    let runs = 0;
    const waiting = new Map();
    const endAll = (output) => {
        frame?.remove();
        frame = null;
        for (const resolve of waiting.values()) resolve({ output, failed: true });
        waiting.clear();
    };
    window.addEventListener("message", (event) => {
        if (!frame || event.source !== frame.contentWindow) return;
        if (event.data?.broken) return endAll("Python could not start in this browser: " + event.data.broken);
        waiting.get(event.data?.id)?.(event.data);
        waiting.delete(event.data?.id);
    });
    const sandbox = () => {
        if (!frame) {
            frame = document.createElement("iframe");
            frame.setAttribute("sandbox", "allow-scripts");
            frame.hidden = true;
            frame.srcdoc = SANDBOX;
            frame.loaded = new Promise((resolve) => frame.addEventListener("load", resolve, { once: true }));
            document.body.append(frame);
        }
        return frame;
    };
    const run = async (code) => {
        if (new RegExp("%(reordering)s").test(code)) {
            return { output: "Not run: this code holds characters that change the order it reads in, so what would run is not what you see.", failed: true };
        }
        const running = sandbox();
        await running.loaded;
        const id = ++runs;
        return new Promise((resolve) => {
            const limit = setTimeout(() => endAll("Stopped: it ran longer than %(seconds)d s."), %(seconds)d * 1000);
            waiting.set(id, (ran) => { clearTimeout(limit); resolve(ran); });
            running.contentWindow.postMessage({ id, code }, "*");
        });
    };
    // What a run printed, for the model's call whose code it was (a message marked browser-run),
    // through the page's bridge (webui/page_bridge.py).
    const answerCall = (code, ran) => {
        const marker = code.closest("[data-testid=bot]")?.querySelector(".browser-run");
        if (!marker || !window.anychatBridge) return;
        const key = [...marker.classList].find((name) => name.startsWith("k-")).slice(2);
        window.anychatBridge.send("run", { key, output: ran.output, failed: Boolean(ran.failed) });
    };
    const CODE = "#chatbot [data-testid=bot] code.language-python, #chatbot [data-testid=bot] code.language-py";
    // Gradio may draw a reply again (a later update of the chat) while its block runs or after:
    // what each block's run shows is kept by its place and text, and shown again in the new drawing.
    const shown = new Map();
    const keyOf = (code) => [...document.querySelectorAll(CODE)].indexOf(code) + ":" + code.textContent;
    const show = (bar, state) => {
        const [button, output] = bar.children;
        button.disabled = Boolean(state.running);
        output.hidden = false;
        output.textContent = state.running ? words["chat.running"] : state.output || "(it printed nothing)";
        output.classList.toggle("failed", Boolean(state.failed));
    };
    const showEverywhere = (key, state) => {
        shown.set(key, state);
        for (const code of document.querySelectorAll(CODE)) {
            const bar = code.closest("pre")?.nextElementSibling;
            if (bar?.classList.contains("python-run") && keyOf(code) === key) show(bar, state);
        }
    };
    const addButtons = () => {
        for (const code of document.querySelectorAll(CODE)) {
            const block = code.closest("pre");
            if (!block || block.nextElementSibling?.classList.contains("python-run")) continue;
            const bar = document.createElement("div");
            bar.className = "python-run";
            const button = document.createElement("button");
            button.textContent = words["chat.run"];
            const output = document.createElement("pre");
            output.className = "python-output";
            output.hidden = true;
            button.addEventListener("click", async () => {
                const key = keyOf(code);
                showEverywhere(key, { running: true });
                const ran = await run(code.textContent);
                showEverywhere(key, ran);
                answerCall([...document.querySelectorAll(CODE)].find((each) => keyOf(each) === key) || code, ran);
            });
            bar.append(button, output);
            block.after(bar);
            const state = shown.get(keyOf(code));
            if (state) show(bar, state);
        }
    };
    new MutationObserver(addButtons).observe(document.body, { subtree: true, childList: true });
}""" % {"sandbox": json.dumps(SANDBOX), "worker": json.dumps(WORKER), "path": PYODIDE_PATH, "seconds": RUN_SECONDS,
       "reordering": REORDERING, "words": script_words("chat.run", "chat.running")}
