"""How long `python app.py` takes to serve its page on the embedded model, and the memory it then
holds, against bare llama-cpp-python opening the same GGUF, side by side in one run.

    python bench/start.py [--rounds 5]

Each round starts the app as a user does (`python app.py --port N`, a data folder of its own),
times it to the first answer of its page, has it write one short reply through its API and reads
its resident memory; and starts a bare `python -c` that imports llama-cpp-python, opens the same
GGUF with the same context, writes the same number of tokens and reads its own. Rounds alternate
which goes first; figures are medians. The app's first start on a fresh machine (its model cache
empty, so it reads the GGUF's tokenizer and chat template once) is timed once, at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.browser import free_port  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.processes import stop_process  # noqa: E402

REPLY_TOKENS = 16
MESSAGES = [{"role": "user", "content": "Say hello."}]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False",
       "OMP_WAIT_POLICY": "PASSIVE"}

# The bare way: what a user of llama-cpp-python writes, with the context ours opens here (the
# model's trained context, where memory allows it).
BARE = """
import sys, time, psutil
from llama_cpp import Llama
llm = Llama(sys.argv[1], n_ctx=int(sys.argv[2]), verbose=False)
print("loaded", flush=True)
llm.create_chat_completion([{"role": "user", "content": "Say hello."}], max_tokens=int(sys.argv[3]), temperature=0)
print(psutil.Process().memory_info().rss, flush=True)
"""


def ours(data_dir: Path, cache_dir: str | None = None) -> tuple[float, int]:
    """Seconds from `python app.py` to its page's first answer, and its resident bytes after one reply."""
    port = free_port()
    env = {**ENV, "ANYCHAT_DATA_DIR": str(data_dir), "GRADIO_TEMP_DIR": str(data_dir / "gradio")}
    if cache_dir:
        env["ANYCHAT_CACHE_DIR"] = cache_dir
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the app exited with {process.returncode}: run `python app.py` to see why")
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        served = time.perf_counter() - started
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": model, "messages": MESSAGES, "max_tokens": REPLY_TOKENS, "temperature": 0}).raise_for_status()
        return served, psutil.Process(process.pid).memory_info().rss
    finally:
        stop_process(process, 30)


def bare(gguf: str, context: int) -> tuple[float, int]:
    """Seconds from `python -c` to llama-cpp-python's model opened, and its resident bytes after one reply."""
    started = time.perf_counter()
    done = subprocess.Popen([sys.executable, "-c", BARE, gguf, str(context), str(REPLY_TOKENS)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert done.stdout.readline().strip() == "loaded", "bare llama-cpp-python did not load the model"
        loaded = time.perf_counter() - started
        rss = int(done.stdout.readline())
    finally:
        done.kill()
        done.wait()
    return loaded, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from engines.model_files.gguf_header import GgufModel
    from harness.embedded_weights import embedded_weights

    gguf = embedded_weights()  # the weights python app.py reads
    context = GgufModel.read(gguf).context_length
    scratch = Path(tempfile.mkdtemp(prefix="anychat-bench-start-"))
    try:
        results = {"ours": [], "bare": []}
        for round_index in range(args.rounds):
            ways = [("ours", lambda: ours(scratch / f"data-{round_index}")), ("bare", lambda: bare(str(gguf), context))]
            for name, run in ways if round_index % 2 == 0 else ways[::-1]:
                results[name].append(run())
        first, _ = ours(scratch / "data-first", cache_dir=str(scratch / "empty-cache"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    start = {name: statistics.median(seconds for seconds, _ in runs) for name, runs in results.items()}
    memory = {name: statistics.median(rss for _, rss in runs) / 2**20 for name, runs in results.items()}
    print(f"{args.rounds} rounds, medians; memory after one reply of {REPLY_TOKENS} tokens; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(markdown_table(["way", "start (s)", "resident (MiB)"], [
        ["python app.py, to its page served", f"{start['ours']:.2f}", f"{memory['ours']:.0f}"],
        ["python app.py, first start (model cache empty)", f"{first:.2f}", ""],
        ["bare llama-cpp-python, to the model opened", f"{start['bare']:.2f}", f"{memory['bare']:.0f}"],
        ["ours / bare", f"{start['ours'] / start['bare']:.2f}", f"{memory['ours'] / memory['bare']:.2f}"],
    ]))


if __name__ == "__main__":
    main()
