"""What a person sees in the page against ChatModel directly, side by side in one run.

    python bench/ui_stream.py [--rounds 3] [--tokens 128] [--history 200] [--model PATH] [--remote] [--no-browser]

The page runs as `python app.py` in its own process (as users run it) and is read two ways: in
Chromium (the reply's text as the browser shows it, timed by a MutationObserver in the page), and
with gradio_client (the same throttled Chatbot updates a browser receives, without rendering
them). ChatModel runs in this process, on the same model. Each round sends the same greedy
request every way, rotating which goes first; then again after importing a conversation of
--history messages into the page (and giving ChatModel the same messages). Reported: time to
first visible token, decode tokens/s after it (tokens shown over the time from the first shown
to the last), the ratios to direct (each round's against direct's in the same round: their median
and middle half), how many updates the page sent, and the rate the page shows against the rate its
engine wrote at in the same reply (the stats line under the reply): the page keeping up with its
engine, apart from the engine sharing the cores with the browser and the server; and, for
Chromium, the CPU time its processes took per reply (what the page's updates cost the machine the
model shares).

With --remote the model runs in a server of its own (`python app.py api`, as a remote server
would), the page reaches it through the remote backend, and direct is the official openai client
talking to that server (the same messages): what the page adds in front of a remote model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
import psutil  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402

from bench.api_stream import timed_api  # noqa: E402
from engines import ChatModel, Response  # noqa: E402
from harness.browser import (  # noqa: E402
    WATCH_REPLY, AppProcess, bot_messages, chromium, import_conversation, open_chat, open_tab, send, set_number, wait_until_answered,
)
from harness.markdown_table import markdown_table  # noqa: E402
from harness.paired_rounds import spread  # noqa: E402

QUESTION = "Write the numbers from 1 to 1000, separated by commas."
ENGINE_RATE = re.compile(r"([0-9.]+) tokens/s")


def history_of(length: int) -> list[dict[str, str]]:
    """Short messages: the long history is there to grow the Chatbot the page re-processes on every
    update, not to make the model's prompt (the same on both sides) long."""
    return [{"role": ("user", "assistant")[i % 2], "content": f"Note {i}."} for i in range(length)]


class Timed(NamedTuple):
    """One reply of one way. ``engine_rate``: the rate the engine wrote at, as the page's stats
    line says (None for direct, which is the engine); ``browser_cpu``: the CPU seconds Chromium's
    processes took while the reply was written (None for the ways without a browser)."""

    first_token: float
    rate: float
    updates: int
    engine_rate: float | None = None
    browser_cpu: float | None = None


def browser_seconds() -> float:
    """The CPU time Chromium's processes (this process's descendants) have taken so far."""
    total = 0.0
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "chrom" in process.name() or "headless" in process.name():
                times = process.cpu_times()
                total += times.user + times.system
    return total


def engine_rate(stats_line: str) -> float:
    """The rate in a reply's stats line (a reply of one token has none)."""
    found = ENGINE_RATE.search(stats_line)
    return float(found.group(1)) if found else float("nan")


def timed_direct(chat_model: ChatModel, history: list[dict], tokens: int) -> Timed:
    finished: list[Response] = []
    started = time.perf_counter()
    first = None
    messages = [*history, {"role": "user", "content": QUESTION}]
    for piece in chat_model.stream_chat(messages, on_finish=finished.append, temperature=0, max_new_tokens=tokens):
        if first is None and piece:
            first = time.perf_counter()
    ended = time.perf_counter()
    return Timed(first - started, (finished[0].response_length - 1) / (ended - first), 0)


def timed_page(client: Client, conversation_file: str, chat_model: ChatModel, tokens: int) -> Timed:
    """One fresh conversation (the imported history) and the question, through /chat."""
    client.predict(handle_file(conversation_file), api_name="/import_conversation")
    started = time.perf_counter()
    first, updates, reply, stats_line = None, 0, "", ""
    job = client.submit({"text": QUESTION, "files": []}, temperature=0, max_new_tokens=tokens, seed=None, api_name="/chat")
    for chatbot, *_ in job:
        updates += 1
        stats_line = next((text for message in reversed(chatbot) for part in message["content"]
                           if "reply-stats" in (text := part.get("text") or "")), stats_line)
        last = chatbot[-1] if chatbot else None
        if last and last["role"] == "assistant" and last["content"] and last["content"][0].get("text"):
            reply = last["content"][0]["text"]
            if first is None:
                first = time.perf_counter()
    ended = time.perf_counter()
    reply_tokens = len(chat_model.engine.tokenizer(reply, add_special_tokens=False).input_ids)
    return Timed(first - started, (reply_tokens - 1) / (ended - first), updates, engine_rate(stats_line))


def timed_browser(page, conversation_file: str, history: list[dict], chat_model: ChatModel) -> Timed:
    """One fresh conversation (the imported history) and the question, typed into the page."""
    from playwright.sync_api import expect

    import_conversation(page, conversation_file)
    expect(bot_messages(page)).to_have_count(sum(turn["role"] == "assistant" for turn in history))
    page.evaluate(WATCH_REPLY)
    started = page.evaluate("performance.now()")
    browser_before = browser_seconds()
    wait_until_answered(page, send(page, QUESTION))
    browser_cpu = browser_seconds() - browser_before
    shown = page.evaluate("window.shown")
    _, replies, reply = next(entry for entry in reversed(shown) if entry[2])
    writing = [at for at, count, text in shown if count == replies and text]
    last = next(at for at, count, text in shown if count == replies and text == reply)
    reply_tokens = len(chat_model.engine.tokenizer(reply, add_special_tokens=False).input_ids)
    showing = (last - writing[0]) / 1000
    # A short reply may be shown whole in one update: no rate to tell.
    updates = len({text for _, count, text in shown if count == replies and text})
    return Timed((writing[0] - started) / 1000, (reply_tokens - 1) / showing if showing else float("nan"), updates,
                 engine_rate(page.locator("#chatbot .reply-stats").last.inner_text()), browser_cpu)


def conversation_file(history: list[dict], folder: str) -> str:
    path = os.path.join(folder, f"history-{len(history)}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"system_prompt": "", "turns": history}, f)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--history", type=int, default=200, help="messages in the long conversation")
    parser.add_argument("--model", default=None, help="model path (default: the embedded SmolLM2)")
    parser.add_argument("--remote", action="store_true", help="the model in a server of its own, the page in front of it through the remote backend")
    parser.add_argument("--no-browser", action="store_true", help="leave Chromium out (gradio_client and direct only)")
    args = parser.parse_args()

    model_args = ("--model", args.model) if args.model else ()
    direct_way = "openai → server" if args.remote else "ChatModel"
    rows = {}
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="anychat-bench-"))
        upstream = None
        if args.remote:
            (Path(folder) / "upstream").mkdir()
            upstream = AppProcess(Path(folder) / "upstream", ("api", *model_args))
            stack.callback(upstream.stop)
            model_args = ("--model", upstream.url + "v1")
        server = AppProcess(Path(folder), model_args)
        stack.callback(server.stop)
        # Closed before the app is stopped: the app waits for the client's heartbeat stream to end
        # before it exits (closed, the stream ends at its next beat).
        client = stack.enter_context(contextlib.closing(Client(server.url, verbose=False)))
        # Also the tokenizer that counts the page's tokens where the model is remote.
        chat_model = stack.enter_context(ChatModel({"model_name_or_path": args.model} if args.model else None))
        if upstream is None:
            ways = {direct_way: lambda history, saved, tokens: timed_direct(chat_model, history, tokens)}
        else:
            upstream_client = openai.OpenAI(base_url=upstream.url + "v1", api_key="unused", max_retries=0, timeout=600)
            model_id = upstream_client.models.list().data[0].id
            ways = {direct_way: lambda history, saved, tokens: Timed(
                *timed_api(upstream_client, model_id, tokens, [*history, {"role": "user", "content": QUESTION}])[:2], 0)}
        ways["gradio_client"] = lambda history, saved, tokens: timed_page(client, saved, chat_model, tokens)
        if not args.no_browser:
            page = stack.enter_context(chromium(120_000)).new_page()
            open_chat(page, server.url)
            open_tab(page, "Settings")
            set_number(page, "temperature", 0)
            open_tab(page, "Chat")
            settings = {"tokens": None}

            def browser_way(history, saved, tokens):
                if settings["tokens"] != tokens:
                    open_tab(page, "Settings")
                    set_number(page, "max-new-tokens", tokens)
                    open_tab(page, "Chat")
                    settings["tokens"] = tokens
                return timed_browser(page, saved, history, chat_model)

            ways["Chromium"] = browser_way
        for history in ([], history_of(args.history)):
            saved = conversation_file(history, folder)
            for way in ways.values():  # warm-up
                way(history, saved, 8)
            results = {name: [] for name in ways}
            for round_index in range(args.rounds):
                order = list(ways.items())
                shift = round_index % len(order)
                for name, way in order[shift:] + order[:shift]:
                    results[name].append(way(history, saved, args.tokens))
            rows[len(history)] = results

    print(f"{args.rounds} rounds, {args.tokens} tokens each, greedy, medians, load average {os.getloadavg()[0]:.1f}")
    lines = []
    for length, results in rows.items():
        for name, runs in results.items():
            versus_direct = spread([run.rate / direct.rate for run, direct in zip(runs, results[direct_way])])
            versus_engine = "" if name == direct_way else f"{spread([run.rate / run.engine_rate for run in runs])[0]:.2f}"
            lines.append([
                length, name, f"{statistics.median(run.first_token for run in runs) * 1000:.0f} ms",
                f"{statistics.median(run.rate for run in runs):.1f}", f"{versus_direct[0]:.2f}", f"{versus_direct[1]:.2f}-{versus_direct[2]:.2f}",
                versus_engine, "" if name == direct_way else f"{statistics.median(run.updates for run in runs):.0f}",
                "" if runs[0].browser_cpu is None else f"{statistics.median(run.browser_cpu for run in runs):.2f} s",
            ])
    print(markdown_table(["history", "way", "first token", "tokens/s", "vs direct", "middle half", "vs its engine", "updates", "browser CPU"], lines))


if __name__ == "__main__":
    main()
