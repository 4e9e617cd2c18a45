"""Cancellation and model lifetime soak, at the issue's full counts, printed as a table.

    python bench/soak.py [--page-cycles 100] [--api-disconnects 100] [--lifetime-cycles 20]
                         [--cancel-backends huggingface,vllm] [--lifetime-backends huggingface,vllm] [--no-kill]

The app runs in this process as `python app.py` wires it (harness/soak_cycles.py, shared with
tests/test_soak.py, which runs the same cycles at CI counts with assertions). For each backend:
Stop/Regenerate cycles in the page in Chromium, then streams closed by the client after 3 chunks
on /v1; then load/unload cycles through the page's /load and /unload; then vLLM's engine core is
killed in the middle of a stream and the model loaded again from the page. Memory (RSS) and
threads are the app's whole process tree (vLLM's engine processes included, the browser not).
The first cycle of each run is a warm-up and the baseline is taken after it (see tests/test_soak.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from gradio_client import Client  # noqa: E402

from engines import LoadedModels  # noqa: E402
from harness.browser import chromium, open_chat  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.soak_cycles import (  # noqa: E402
    BACKENDS, COUNTING, ENGINE_STOPPED, VLLM, Trace, api_disconnects, busy, engine_core, load_unload_cycles, model_id, page_load,
    page_stop_regenerate, served_app, start_long_reply, timed_request, wait_until_idle,
)

MIB = 2**20
rows: list[tuple[str, str]] = []


def row(name: str, value: str) -> None:
    rows.append((name, value))
    print(f"  {name}: {value}", flush=True)


def usage_rows(label: str, trace: Trace) -> None:
    mib = [u.rss / MIB for u in (trace.before, trace.after, trace.peak)]
    row(f"{label}: RSS before / after / max", f"{mib[0]:.0f} / {mib[1]:.0f} / {mib[2]:.0f} MiB ({mib[1] / mib[0] - 1:+.1%})")
    row(f"{label}: threads before / after / max", f"{trace.before.threads} / {trace.after.threads} / {trace.peak.threads}")


def cancellation(backend: str, loaded_models: LoadedModels, url: str, client: Client, browser, args: argparse.Namespace) -> None:
    print(f"cancellation on {backend}…", flush=True)
    assert page_load(client, BACKENDS[backend]).startswith("✓ Loaded")
    timed_request(url)
    fresh = timed_request(url)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    open_chat(page, url)
    start_long_reply(page)
    page_stop_regenerate(page, 1)
    trace = Trace()
    started = time.perf_counter()
    page_stop_regenerate(page, args.page_cycles, trace)
    seconds = time.perf_counter() - started
    wait_until_idle(loaded_models)
    context.close()
    usage_rows(f"{backend}, {args.page_cycles} page stop/regenerate ({seconds / args.page_cycles:.1f} s each)", trace)

    api_disconnects(url, 1)
    trace = Trace()
    api_disconnects(url, args.api_disconnects, trace)
    after = timed_request(url)
    settled = wait_until_idle(loaded_models)
    label = f"{backend}, {args.api_disconnects} API disconnects"
    usage_rows(label, trace)
    if backend == "vllm":
        row(f"{label}: vLLM unfinished requests after", f"{loaded_models.model.engine.unfinished_requests()} (idle {settled:.2f} s after the next request)")
    row(f"{label}: next request / fresh request", f"{after:.2f} s / {fresh:.2f} s")


def lifetime(backend: str, loaded_models: LoadedModels, client: Client, cycles: int) -> None:
    print(f"{cycles} load/unload cycles on {backend}…", flush=True)
    loaded_models.unload()
    done = load_unload_cycles(client, BACKENDS[backend], cycles)
    baseline = done[0].after_unload.rss
    ratios = [cycle.after_unload.rss / baseline - 1 for cycle in done[1:]]
    label = f"{backend}, {cycles} load/unload"
    row(f"{label}: RSS after unload, cycle 1 (baseline)", f"{baseline / MIB:.0f} MiB")
    row(f"{label}: RSS after unload vs baseline, cycles 2-{cycles}",
        f"worst {max(ratios, default=0):+.1%}, last {ratios[-1] if ratios else 0:+.1%}; each: " + " ".join(f"{r:+.1%}" for r in ratios))
    row(f"{label}: threads after each unload", " ".join(str(cycle.after_unload.threads) for cycle in done))
    row(f"{label}: load time median", f"{sorted(c.load_seconds for c in done)[len(done) // 2]:.1f} s")


def failed_loads(loaded_models: LoadedModels, client: Client, url: str) -> None:
    loaded = loaded_models.describe()
    for settings in ({"infer_backend": "huggingface", "model_name_or_path": "/no/such/model"}, {"infer_backend": "sglang"}):
        status = page_load(client, settings)
        kept = status.startswith("⚠ **Could not load:**") and loaded_models.describe() == loaded
        timed_request(url)
        row(f"failed load ({settings.get('model_name_or_path') or settings['infer_backend']})",
            "refused, previous model kept serving" if kept else f"NOT KEPT: {status[:80]}")


def kill(loaded_models: LoadedModels, client: Client, url: str) -> None:
    print("killing vLLM's engine core mid-stream…", flush=True)
    if loaded_models.empty or loaded_models.model.backend != "vllm":
        page_load(client, VLLM)
    core = engine_core()
    body = {"model": model_id(url), "messages": [{"role": "user", "content": COUNTING}], "max_tokens": 2000, "stream": True}
    with httpx.Client(timeout=60) as http, http.stream("POST", f"{url}v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        next(lines)
        core.kill()
        killed = time.perf_counter()
        rest = [line for line in lines if line]
    told = time.perf_counter() - killed
    error = next((line for line in rest if '"error"' in line), "")
    row("vLLM killed mid-stream: client told", f"in {told:.2f} s, {'clear message' if ENGINE_STOPPED.search(error) else 'NO clear message'}")
    started = time.perf_counter()
    status = page_load(client, VLLM)
    row("vLLM reload from the page, no restart", f"{'serves' if status.startswith('✓ Loaded') and timed_request(url) else 'FAILED'}"
        f" after {time.perf_counter() - started:.1f} s; {busy(loaded_models) or 'idle'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page-cycles", type=int, default=100)
    parser.add_argument("--api-disconnects", type=int, default=100)
    parser.add_argument("--lifetime-cycles", type=int, default=20)
    parser.add_argument("--cancel-backends", default="huggingface,vllm")
    parser.add_argument("--lifetime-backends", default="huggingface,vllm")
    parser.add_argument("--no-kill", action="store_true", help="skip killing vLLM's engine")
    args = parser.parse_args()

    loaded_models = LoadedModels()
    started = time.perf_counter()
    try:
        with served_app(loaded_models) as url, chromium(300_000) as browser:
            client = Client(url, verbose=False)
            for backend in filter(None, args.cancel_backends.split(",")):
                try:
                    cancellation(backend, loaded_models, url, client, browser, args)
                except Exception as error:  # reported in the table; the other figures still come
                    row(f"{backend} cancellation", f"FAILED: {type(error).__name__}: {str(error).splitlines()[0]}")
            if not loaded_models.empty:
                failed_loads(loaded_models, client, url)
            if not args.no_kill:
                kill(loaded_models, client, url)
            for backend in filter(None, args.lifetime_backends.split(",")):
                lifetime(backend, loaded_models, client, args.lifetime_cycles)
    finally:
        loaded_models.unload()

    print(f"\npage cycles {args.page_cycles}, API disconnects {args.api_disconnects}, load/unload cycles {args.lifetime_cycles}; "
          f"{(time.perf_counter() - started) / 60:.0f} min; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(markdown_table(["figure", "value"], rows))


if __name__ == "__main__":
    main()
