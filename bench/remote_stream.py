"""A remote server's replies through anychat against the same server read directly, side by side in one run.

    python bench/remote_stream.py [--rounds 5] [--tokens 128]

The server is `python app.py api` on the embedded model, in its own process as a remote server
would be. Three ways read the same greedy reply, each round in another order: ``direct``, the
official openai client talking to the server; ``remote``, ChatModel on the remote backend in this
process; ``gateway``, the openai client talking to a second `app.py api` whose model is the
server's, through the remote backend. Reported: time to first token and decode tokens/s after it,
each way's against direct (aims: tokens/s 0.95 or more, first token within 20 ms more), the first
token's as the median of each round's difference from direct's in the same round.
"""

from __future__ import annotations

import argparse
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

from bench.api_stream import timed_api, timed_direct  # noqa: E402
from engines import ChatModel  # noqa: E402
from harness.browser import AppProcess  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.paired_rounds import spread  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp:
        for name in ("upstream", "gateway"):
            (Path(temp) / name).mkdir()
        upstream = AppProcess(Path(temp) / "upstream", ("api",))
        gateway = None
        try:
            address = upstream.url + "v1"
            gateway = AppProcess(Path(temp) / "gateway", ("api", "--model", address))
            direct = openai.OpenAI(base_url=address, api_key="unused", max_retries=0, timeout=600)
            through = openai.OpenAI(base_url=gateway.url + "v1", api_key="unused", max_retries=0, timeout=600)
            model_id = direct.models.list().data[0].id
            with ChatModel({"model_name_or_path": address}) as remote:
                ways = {
                    "direct": lambda tokens: timed_api(direct, model_id, tokens),
                    "remote": lambda tokens: timed_direct(remote, tokens),
                    "gateway": lambda tokens: timed_api(through, model_id, tokens),
                }
                for run in ways.values():
                    run(8)  # warm-up
                results: dict[str, list[tuple[float, float, int]]] = {way: [] for way in ways}
                order = list(ways)
                for round_index in range(args.rounds):
                    for way in order[round_index % len(order):] + order[:round_index % len(order)]:
                        results[way].append(ways[way](args.tokens))
        finally:
            for server in (gateway, upstream):
                if server is not None:
                    server.stop()

    ttft = {way: statistics.median(r[0] for r in runs) for way, runs in results.items()}
    rate = {way: statistics.median(r[1] for r in runs) for way, runs in results.items()}
    print(f"{args.rounds} rounds, {args.tokens} tokens each, greedy, medians")
    print(markdown_table(["way", "time to first token", "vs direct", "middle half of the rounds", "decode tokens/s", "vs direct"], [
        [way, f"{ttft[way] * 1000:.0f} ms", *later_than_direct(results[way], results["direct"]), f"{rate[way]:.1f}", f"{rate[way] / rate['direct']:.2f}"]
        for way in results
    ]))
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def later_than_direct(runs: list[tuple[float, float, int]], direct: list[tuple[float, float, int]]) -> list[str]:
    """How much later each round's first token came than direct's in the same round: the median
    and the middle half of those differences."""
    median, low, high = spread([(run[0] - reference[0]) * 1000 for run, reference in zip(runs, direct)])
    return [f"{median:+.0f} ms", f"{low:+.0f} to {high:+.0f} ms"]


if __name__ == "__main__":
    main()
