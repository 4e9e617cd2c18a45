"""Switching between two models: the first token of the other model with both kept loaded, against
the same model asked again and against one model at a time (the other loaded for the request).

    python bench/model_switch.py [--rounds 5] [--tokens 16]

Two `python app.py api` processes on llama.cpp, each with the embedded model and its copy under
another name in a models folder, loaded on demand (--load-on-demand): ``kept`` keeps both
(--models-memory), ``one at a time`` replaces one with the other. Each round asks the embedded
model, then times the copy (a switch) and the copy again (the same model), each request with a
question of its own. Reported: the median time to first token of each, through the official
openai client.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from bench.api_stream import timed_api  # noqa: E402
from engines.model_files.model_args import EMBEDDED_MODEL_NAME  # noqa: E402
from engines.model_files.paths import default_gguf  # noqa: E402
from harness.browser import AppProcess  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

COPY = "copy"


def question(number: int) -> list[dict]:
    """A question of its own for each request, so that no model reads a prompt it has read before
    (llama.cpp would reuse it from its cache, and the model asked again would be timed on less work)."""
    return [{"role": "user", "content": f"Request {number}: name three animals that live in the sea."}]
# One at a time, every switch is a load: more than one client's share of loads a minute.
WAYS = {"kept": ("--models-memory", "64gb"), "one at a time": ("--max-model-loads-per-user", "1000")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()

    first_token: dict[str, list[float]] = {"same model (kept)": [], "switch (kept)": [], "switch (one at a time)": []}
    with tempfile.TemporaryDirectory() as temp:
        models = Path(temp) / "models"
        models.mkdir()
        (models / f"{COPY}.gguf").symlink_to(default_gguf())
        apps: dict[str, AppProcess] = {}
        try:
            for way, flags in WAYS.items():
                (Path(temp) / way).mkdir()
                apps[way] = AppProcess(Path(temp) / way, ("api", "--backend", "llamacpp", "--load-on-demand", "--models-dir", str(models), *flags))
            clients = {way: openai.OpenAI(base_url=app.url + "v1", api_key="unused", max_retries=0, timeout=600) for way, app in apps.items()}
            for client in clients.values():
                timed_api(client, COPY, 4)  # warm-up: the copy loaded once (and kept, where it is)
            asked = (question(number) for number in itertools.count())
            for _ in range(args.rounds):
                for way, client in clients.items():
                    timed_api(client, EMBEDDED_MODEL_NAME, 4, next(asked))
                    first_token[f"switch ({way})"].append(timed_api(client, COPY, args.tokens, next(asked))[0])
                    if way == "kept":
                        first_token["same model (kept)"].append(timed_api(client, COPY, args.tokens, next(asked))[0])
        finally:
            for app in apps.values():
                app.stop()

    medians = {row: statistics.median(times) for row, times in first_token.items()}
    same = medians["same model (kept)"]
    print(f"{args.rounds} rounds, {args.tokens} tokens each, greedy, medians; llama.cpp, the embedded model and its copy")
    print(markdown_table(["way", "time to first token", "vs the same model"], [
        [row, f"{seconds * 1000:.0f} ms", f"{seconds / same:.2f}x"] for row, seconds in medians.items()
    ]))
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
