"""Python run in the user's own browser (Pyodide, served by the app from its npm package, which
setup.sh fetches into .cache/pyodide): a ▶ Run button under each Python code block of a reply
runs the block in a Web Worker and shows what it printed, as text, under the block. Nothing runs
on the server; a run that takes longer than RUN_SECONDS is ended with its worker."""

from __future__ import annotations

import json
from pathlib import Path

PYODIDE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "pyodide"
PYODIDE_PATH = "/pyodide/"
RUN_SECONDS = 30

# The worker: loads the interpreter once, then runs each block it is sent, its prints gathered.
# PYODIDE_URL is put in as the page's own address (a worker made from a Blob has no base to take a path from).
WORKER = """
import { loadPyodide } from "PYODIDE_URLpyodide.mjs";
const ready = loadPyodide({ indexURL: "PYODIDE_URL" });
self.onmessage = async (event) => {
    const pyodide = await ready;
    let output = "";
    pyodide.setStdout({ batched: (text) => { output += text + "\\n"; } });
    pyodide.setStderr({ batched: (text) => { output += text + "\\n"; } });
    try {
        const value = await pyodide.runPythonAsync(event.data);
        if (value !== undefined && value !== null) output += String(value) + "\\n";
        self.postMessage({ output });
    } catch (error) {
        self.postMessage({ output: output + String(error.message || error), failed: true });
    }
};
"""

# Runs once as the page loads (demo.load's js).
RUN_BUTTONS = """() => {
    const WORKER = %(worker)s.replaceAll("PYODIDE_URL", new URL("%(path)s", location.href).href);
    let worker = null;
    const run = (code) => new Promise((resolve) => {
        worker = worker || new Worker(URL.createObjectURL(new Blob([WORKER], { type: "text/javascript" })), { type: "module" });
        const limit = setTimeout(() => {
            worker.terminate();
            worker = null;
            resolve({ output: "Stopped: it ran longer than %(seconds)d s.", failed: true });
        }, %(seconds)d * 1000);
        worker.onmessage = (event) => { clearTimeout(limit); resolve(event.data); };
        worker.onerror = (event) => {
            clearTimeout(limit);
            worker = null;
            resolve({ output: "Python could not start in this browser: " + (event.message || "the interpreter did not load"), failed: true });
        };
        worker.postMessage(code);
    });
    const addButtons = () => {
        for (const code of document.querySelectorAll("#chatbot .bot code.language-python, #chatbot .bot code.language-py")) {
            const block = code.closest("pre");
            if (!block || block.nextElementSibling?.classList.contains("python-run")) continue;
            const bar = document.createElement("div");
            bar.className = "python-run";
            const button = document.createElement("button");
            button.textContent = "▶ Run";
            const output = document.createElement("pre");
            output.className = "python-output";
            output.hidden = true;
            button.addEventListener("click", async () => {
                button.disabled = true;
                output.hidden = false;
                output.textContent = "Running…";
                const { output: printed, failed } = await run(code.textContent);
                output.textContent = printed || "(it printed nothing)";
                output.classList.toggle("failed", Boolean(failed));
                button.disabled = false;
            });
            bar.append(button, output);
            block.after(bar);
        }
    };
    new MutationObserver(addButtons).observe(document.body, { subtree: true, childList: true });
}""" % {"worker": json.dumps(WORKER), "path": PYODIDE_PATH, "seconds": RUN_SECONDS}
