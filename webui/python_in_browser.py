"""Python run in the user's own browser (Pyodide, served by the app from its npm package, which
setup.sh fetches into .cache/pyodide): a ▶ Run button under each Python code block of a reply
runs the block in a Web Worker and shows what it printed, as text, under the block. Nothing runs
on the server; a run that takes longer than RUN_SECONDS is ended with its worker.

The model's ``python`` tool runs the same way (``browser_python``): while the call waits, the
reply shows its code in a message marked with the code's key, and when the user presses ▶ Run
under it, the page's script puts what it printed, with the key, into a hidden field, whose change
event hands it to the call. The user's press is what runs it, never the marker alone: a reply can
write such a marker into its own text, and code it wrote would otherwise run in the user's
browser, beside the page and its login, without the user's say."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from engines.tools import BUILTIN_TOOLS, Tool

from .tool_approval import settle

PYODIDE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "pyodide"
PYODIDE_PATH = "/pyodide/"
RUN_SECONDS = 30
# How long a call waits for the user to press Run (and the run to end).
WAIT_SECONDS = 600
RESULT_ID = "browser-result"


def code_key(code: str) -> str:
    """The key of a run of ``code``, which fits a class name (one run serves calls of the same code)."""
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def browser_python(session: Any) -> Tool:
    """The ``python`` tool of one tab (a ChatSession): each call waits for the tab's browser to run its code."""

    async def run(arguments: dict[str, Any]) -> str:
        key = code_key(arguments["code"])
        ran = session.browser_runs.setdefault(key, asyncio.get_running_loop().create_future())
        try:
            output, failed = await asyncio.wait_for(asyncio.shield(ran), WAIT_SECONDS)
        except TimeoutError:
            raise RuntimeError(f"nobody ran it in the browser within {WAIT_SECONDS // 60} minutes") from None
        finally:
            session.browser_runs.pop(key, None)
        if failed:
            raise RuntimeError(output)
        return output

    return dataclasses.replace(BUILTIN_TOOLS["python"], run=run)


def finished(session: Any, value: str) -> None:
    """The hidden field's change: what a run printed, for the call that waits on it."""
    try:
        ran = json.loads(value or "{}")
        key, output, failed = str(ran["key"]), str(ran["output"]), bool(ran.get("failed"))
    except (json.JSONDecodeError, KeyError, TypeError):
        return
    waiting = session.browser_runs.get(key)
    if waiting is not None:
        settle(waiting, (output, failed))


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
    // What a run printed, for the model's call whose code it was (a message marked browser-run).
    const answerCall = (code, ran) => {
        const marker = code.closest("[data-testid=bot]").querySelector(".browser-run");
        const field = document.querySelector("#%(result)s textarea, #%(result)s input");
        if (!marker || !field) return;
        const key = [...marker.classList].find((name) => name.startsWith("k-")).slice(2);
        field.value = JSON.stringify({ key, output: ran.output, failed: Boolean(ran.failed), at: Date.now() });
        field.dispatchEvent(new Event("input", { bubbles: true }));
    };
    const addButtons = () => {
        for (const code of document.querySelectorAll("#chatbot [data-testid=bot] code.language-python, #chatbot [data-testid=bot] code.language-py")) {
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
                const ran = await run(code.textContent);
                output.textContent = ran.output || "(it printed nothing)";
                output.classList.toggle("failed", Boolean(ran.failed));
                button.disabled = false;
                answerCall(code, ran);
            });
            bar.append(button, output);
            block.after(bar);
        }
    };
    new MutationObserver(addButtons).observe(document.body, { subtree: true, childList: true });
}""" % {"worker": json.dumps(WORKER), "path": PYODIDE_PATH, "seconds": RUN_SECONDS, "result": RESULT_ID}
