"""Time to first token with one image on llama.cpp: our engine against libmtmd's own helpers
called directly (harness/bare_mtmd.py), same GGUF and projector, same prompt, same image.

    OMP_WAIT_POLICY=PASSIVE python bench/llamacpp_media.py [--rounds 5] [--size 448]

No multimodal GGUF can be downloaded here, so the model is a tiny random-weight Qwen2-VL made by
llama.cpp's own converter (harness/tiny_gguf.py; `bash scripts/setup.sh --test` provides the
converter): its encoder and text model take little time, so the figures show what each way adds
around libmtmd (reading and regularising the image, tokenizing, evaluating), not a real model's
encoding time. Each round sends a new image (so neither way finds it cached), the two ways
alternating which goes first; figures are medians. Ours is timed from the request to its one
token's reply, bare from the image file to its first sampled token; both read the image with the
same threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from PIL import Image  # noqa: E402

from engines import ChatModel  # noqa: E402
from harness.bare_mtmd import BareMtmd  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.tiny_gguf import build_gguf  # noqa: E402

QUESTION = "What is in this picture?"


def image_file(folder: Path, round_number: int, size: int) -> Path:
    picture = Image.new("RGB", (size, size * 3 // 4), (round_number * 37 % 256, 90, 200))
    for x in range(0, picture.width, 5):
        picture.putpixel((x, (x * round_number) % picture.height), (255, 255, 255))
    path = folder / f"round-{round_number}.png"
    picture.save(path)
    return path


def ours(model: ChatModel, path: Path) -> tuple[float, int]:
    """Seconds to the first token, and the prompt's tokens."""
    finished = []
    started = time.perf_counter()
    # Seeded, so that it starts from an empty cache as the bare way does.
    for _ in model.stream_chat([{"role": "user", "content": f"<image>{QUESTION}"}], images=[str(path)], temperature=0, seed=0,
                               max_new_tokens=1, on_finish=finished.append):
        pass
    return time.perf_counter() - started, finished[0].prompt_length


def bare(reference: BareMtmd, prompt: str, path: Path) -> tuple[float, int]:
    started = time.perf_counter()
    result = reference.generate(prompt, [path], 1)
    return time.perf_counter() - started, sum(chunk.n_tokens for chunk in result.chunks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=448, help="width of the images in pixels")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="anychat-bench-media-") as scratch:
        measure(args, Path(scratch))


def measure(args: argparse.Namespace, folder: Path) -> None:
    pair = build_gguf("qwen2_vl", folder)
    with ChatModel({"model_name_or_path": str(pair.model)}) as model:
        marker = model.engine._media.marker
        prompt = model.render_prompt([{"role": "user", "content": f"<image>{QUESTION}"}], images=[str(image_file(folder, 0, args.size))])
        with BareMtmd(pair.model, pair.mmproj, n_threads=model.engine.llama_settings["n_threads_batch"]) as reference:
            ours(model, image_file(folder, 0, args.size))  # warm-up, both ways
            bare(reference, prompt, image_file(folder, 0, args.size))
            times: dict[str, list[tuple[float, int]]] = {"ours": [], "bare": []}
            for round_number in range(1, args.rounds + 1):
                path = image_file(folder, round_number, args.size)
                ways = [("ours", lambda: ours(model, path)), ("bare", lambda: bare(reference, prompt, path))]
                for name, way in ways if round_number % 2 else ways[::-1]:
                    times[name].append(way())
    assert prompt.count(marker) == 1
    median = {name: statistics.median(seconds for seconds, _ in values) for name, values in times.items()}
    print(f"one {args.size}x{args.size * 3 // 4} image, tiny Qwen2-VL GGUF, median of {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(markdown_table(["way", "first token", "vs bare", "prompt tokens"], [
        [label, f"{median[name] * 1000:.1f} ms", f"{median[name] / median['bare']:.2f}", times[name][-1][1]]
        for name, label in (("bare", "bare libmtmd helpers"), ("ours", "our llamacpp engine"))
    ]))


if __name__ == "__main__":
    main()
