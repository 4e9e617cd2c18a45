"""Streaming through the web page's endpoint against ChatModel directly, side by side in one run.

    python bench/ui_stream.py [--rounds 3] [--tokens 128] [--history 200] [--model PATH]

The page runs as `python app.py` in its own process (as users run it) and is read with
gradio_client, which receives the same throttled Chatbot updates a browser does; ChatModel runs
in this process. Each round sends the same greedy request both ways, alternating which goes
first; then again after importing a conversation of --history messages into the page's session
(and giving ChatModel the same messages). Reported: time to first visible token, decode tokens/s
after it, the page / direct ratios, and how many updates the page sent.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gradio_client import Client, handle_file  # noqa: E402

from engines import ChatModel, Response  # noqa: E402
from harness.browser import AppProcess  # noqa: E402

QUESTION = "Write the numbers from 1 to 1000, separated by commas."


def history_of(length: int) -> list[dict[str, str]]:
    """Short messages: the long history is there to grow the Chatbot the page re-processes on every
    update, not to make the model's prompt (the same on both sides) long."""
    return [{"role": ("user", "assistant")[i % 2], "content": f"Note {i}."} for i in range(length)]


def timed_direct(chat_model: ChatModel, history: list[dict], tokens: int) -> tuple[float, float, int]:
    finished: list[Response] = []
    started = time.perf_counter()
    first = None
    messages = [*history, {"role": "user", "content": QUESTION}]
    for piece in chat_model.stream_chat(messages, on_finish=finished.append, temperature=0, max_new_tokens=tokens):
        if first is None and piece:
            first = time.perf_counter()
    ended = time.perf_counter()
    return first - started, (finished[0].response_length - 1) / (ended - first), 0


def timed_page(client: Client, conversation_file: str, chat_model: ChatModel, tokens: int) -> tuple[float, float, int]:
    """One fresh conversation (the imported history) and the question, through /chat."""
    client.predict(handle_file(conversation_file), api_name="/import_conversation")
    started = time.perf_counter()
    first, updates, reply = None, 0, ""
    job = client.submit({"text": QUESTION, "files": []}, temperature=0, max_new_tokens=tokens, seed=None, api_name="/chat")
    for chatbot, _ in job:
        updates += 1
        last = chatbot[-1] if chatbot else None
        if last and last["role"] == "assistant" and last["content"] and last["content"][0].get("text"):
            reply = last["content"][0]["text"]
            if first is None:
                first = time.perf_counter()
    ended = time.perf_counter()
    reply_tokens = len(chat_model.engine.tokenizer(reply, add_special_tokens=False).input_ids)
    return first - started, (reply_tokens - 1) / (ended - first), updates


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
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="anychat-bench-")
    server = AppProcess(Path(folder), ("--model", args.model) if args.model else ())
    rows = {}
    try:
        client = Client(server.url, verbose=False)
        with ChatModel({"model_name_or_path": args.model} if args.model else None) as chat_model:
            for history in ([], history_of(args.history)):
                saved = conversation_file(history, folder)
                timed_direct(chat_model, history, 8)  # warm-up, both sides
                timed_page(client, saved, chat_model, 8)
                direct, page = [], []
                for round_index in range(args.rounds):
                    runs = [
                        (direct, lambda: timed_direct(chat_model, history, args.tokens)),
                        (page, lambda: timed_page(client, saved, chat_model, args.tokens)),
                    ]
                    for results, run in runs if round_index % 2 == 0 else runs[::-1]:
                        results.append(run())
                rows[len(history)] = [[statistics.median(r[i] for r in results) for i in range(3)] for results in (direct, page)]
    finally:
        server.stop()

    print(f"{args.rounds} rounds, {args.tokens} tokens each, greedy, medians")
    print(f"{'history':>8}{'':24}{'ChatModel':>12}{'page':>12}{'page/direct':>13}")
    for length, ((ttft_direct, rate_direct, _), (ttft_page, rate_page, updates)) in rows.items():
        print(f"{length:>8}  {'time to first token':22}{ttft_direct * 1000:>10.0f}ms{ttft_page * 1000:>10.0f}ms"
              f"{ttft_direct / ttft_page:>13.2f}  (direct/page: higher is better)")
        print(f"{length:>8}  {'decode tokens/s':22}{rate_direct:>12.1f}{rate_page:>12.1f}{rate_page / rate_direct:>13.2f}")
        print(f"{length:>8}  {'updates sent':22}{'':>12}{updates:>12.0f}")


if __name__ == "__main__":
    main()
