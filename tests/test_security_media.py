"""Media bombs inside the limits (issue 18, item 6): small files that declare huge pictures, long
or many-channel audio at absurd rates, videos of huge frames or without keyframes, and requests
of many files each just within its limit.

Each is refused from its header before anything is decoded, with a message naming the file, the
limit and its setting, or decoded at the size the model takes, in bounded memory. Memory is the
peak of a fresh process (engines.prompt.media alone) or of the real server (``python app.py`` on tiny
Qwen2-VL and Qwen2-Audio models), while another user's ordinary request is answered.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from gradio_client import Client, handle_file

from engines import ChatModel, MediaError
from engines.prompt.media import _frames_decoded, load_audio, load_image, load_video
from engines.prompt.media_budget import MediaBudget
from engines.model_files.model_args import MediaSettings
from harness.browser import ROOT, AppProcess
from tests.media_samples import flat_png, solid_image, tone, write_audio, write_plain_video, write_silence
from harness.tiny_models import build_qwen2_audio, build_qwen2_vl

pytestmark = pytest.mark.server

LIMITS = MediaSettings()
BUDGET = 768 * 768
QUESTION = "What is this?"
# Generous: the point is "not locked out", on a machine shared with other test suites.
ANSWERED_WITHIN = 60.0


# ---- bombs, written once for the module


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    files = {
        # 88 million RGBA pixels in 344 KB: over image_max_source_pixels.
        "huge.png": flat_png(9400, 9400, alpha=True),
        # 49 million RGBA pixels in 191 KB: just within it; eight of them are 392 million.
        "near.png": flat_png(7000, 7000, alpha=True),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    write_plain_video(folder / "huge.mp4", (10000, 10000), frames=2)
    write_plain_video(folder / "big.mp4", (4096, 4096), frames=32)
    write_silence(folder / "fast.flac", seconds=29, rate=655_350, channels=8)
    write_silence(folder / "wide.flac", seconds=29, rate=192_000, channels=8)
    return {path.name: path for path in folder.iterdir()}


# ---- what decoding one file takes, in a fresh process


@dataclass
class Decoded:
    grown_mib: float
    seconds: float
    shape: tuple | None = None
    refusal: str | None = None


def decode_alone(call: str, without_decord: bool = False) -> Decoded:
    """Runs ``call`` (engines.prompt.media's load_image, load_video or load_audio) in a fresh Python with
    every decoder imported first: how far its peak memory grew, how long it took, and the shape
    of what it returned or the MediaError it raised."""
    script = f"""
import json, sys, time
{"sys.modules['decord'] = None" if without_decord else ""}
import av, numpy, PIL.Image, soundfile, soxr
{"" if without_decord else "import decord"}
from engines import MediaError
from engines.prompt.media import load_audio, load_image, load_video
# VmHWM: this process's own peak (ru_maxrss would start from the parent's size at the fork).
peak = lambda: next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
before, started = peak(), time.perf_counter()
try:
    result = {call}
    result = numpy.asarray(getattr(result, "frames", result))
    outcome = {{"shape": list(result.shape)}}
except MediaError as error:
    outcome = {{"refusal": str(error)}}
print(json.dumps({{"grown_mib": peak() - before, "seconds": time.perf_counter() - started, **outcome}}))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{call}{' without decord' if without_decord else ''}: {outcome}")
    return Decoded(outcome["grown_mib"], outcome["seconds"], tuple(outcome.get("shape") or ()) or None, outcome.get("refusal"))


# ---- images


def test_an_image_declaring_88_million_pixels_is_refused_from_its_header(bombs):
    decoded = decode_alone(f"load_image({str(bombs['huge.png'])!r}, 'image 1 (huge.png)', {BUDGET})")
    assert decoded.refusal == (
        "The image 1 (huge.png) is 9400x9400 pixels, which is larger than the 50 million pixels this app decodes "
        "(the image_max_source_pixels setting, a guard against decompression bombs). Downscale it before sending."
    )
    assert decoded.grown_mib < 50 and decoded.seconds < 2, decoded


def test_an_image_just_within_the_limit_is_downscaled_before_anything_else(bombs):
    """49 million RGBA pixels are 187 MiB decoded; Pillow's resize takes one more such copy
    (premultiplied alpha), and nothing else is full size."""
    decoded = decode_alone(f"load_image({str(bombs['near.png'])!r}, 'image 1', {BUDGET})")
    assert decoded.shape == (768, 768, 3)
    assert decoded.grown_mib < 2.5 * 187, decoded


def test_a_jpeg_is_charged_at_the_size_it_decodes_at(tmp_path):
    photo, drawing = tmp_path / "photo.jpg", tmp_path / "drawing.png"
    solid_image((200, 100, 0), (4000, 3000)).save(photo)
    solid_image((200, 100, 0), (4000, 3000)).save(drawing)
    budget = lambda: MediaBudget(MediaSettings(image_max_source_pixels=1_000_000))  # noqa: E731
    # JPEG decodes at 1/4 here (1000x750), a PNG only at its full 12 million pixels.
    assert load_image(str(photo), "image 1", BUDGET, budget()).size == (886, 665)
    with pytest.raises(MediaError, match=r"image 1 is 4000x3000 pixels, which is larger than the 1 million pixels"):
        load_image(str(drawing), "image 1", BUDGET, budget())


def test_the_budget_charges_a_requests_images_together():
    budget = MediaBudget(MediaSettings(image_max_total_pixels=10_000))
    budget.image("image 1", (100, 60), (100, 60))
    with pytest.raises(MediaError, match=(
        r"The images of this request come to 12,000 pixels with the image 2 \(b.png\), more than the 10,000 this "
        r"server decodes per request \(the image_max_total_pixels setting\), those of earlier messages included\. "
        r"Send fewer or smaller images, or start a new chat\.")):
        budget.image("image 2 (b.png)", (100, 60), (100, 60))


@pytest.mark.parametrize("kind", ["image", "video", "audio"])
def test_a_request_holds_at_most_so_many_files_of_each_kind(kind):
    limit = getattr(LIMITS, f"{kind}_max_count")
    MediaBudget().check_counts({kind: [b""] * limit})
    counted = {"image": "images", "video": "videos", "audio": "audio clips"}[kind]
    with pytest.raises(MediaError, match=fr"This request holds {limit + 1} {counted}; this server reads at most {limit} per "
                                         fr"request \(the {kind}_max_count setting\), those of earlier messages included"):
        MediaBudget().check_counts({kind: [b""] * (limit + 1)})


# ---- video


@pytest.mark.parametrize("reader", ["decord", "pyav"])
def test_a_video_of_10000x10000_frames_is_refused_from_its_header(bombs, reader):
    decoded = decode_alone(f"load_video({str(bombs['huge.mp4'])!r}, 'video 1 (huge.mp4)', 2.0, 32, 256 * 256)", reader == "pyav")
    assert decoded.refusal == (
        "The video 1 (huge.mp4) has frames of 10000x10000 pixels, larger than the 33 million pixels this server decodes "
        "per frame (the video_max_source_pixels setting). Downscale it before sending."
    )
    # Reading the header decodes no frame: FFmpeg's decoders are told the largest frame they may make.
    assert decoded.grown_mib < 100 and decoded.seconds < 3, decoded


@pytest.mark.parametrize("reader", ["decord", "pyav"])
def test_video_frames_are_decoded_at_the_size_the_model_takes(bombs, reader):
    """32 frames of 4096x4096 (24 MiB each as YUV, 48 MiB as RGB): only the 6 sampled ones are
    kept, each converted straight to 256x256."""
    decoded = decode_alone(f"load_video({str(bombs['big.mp4'])!r}, 'video 1', 2.0, 32, 256 * 256)", reader == "pyav")
    assert decoded.shape == (6, 256, 256, 3)
    assert decoded.grown_mib < 150, decoded


def test_sampling_is_charged_for_every_frame_decoded_to_reach_the_sampled_ones():
    keyframes_every_10 = list(range(0, 100, 10))
    # Seeking: from each sample's keyframe, or on from the last sample within the same stretch.
    assert _frames_decoded(keyframes_every_10, [0, 25, 27, 99], seeks=True) == 1 + 6 + 2 + 10
    assert _frames_decoded([0], [0, 25, 27, 99], seeks=True) == 100
    # Reading from the start (PyAV here): everything up to the last sample.
    assert _frames_decoded(keyframes_every_10, [0, 25, 27, 99], seeks=False) == 100


@pytest.mark.parametrize("reader", ["decord", "pyav"])
def test_a_video_without_keyframes_costs_every_frame(tmp_path, reader, monkeypatch):
    if reader == "pyav":
        monkeypatch.setitem(sys.modules, "decord", None)
    frequent = write_plain_video(tmp_path / "frequent.mp4", (640, 360), frames=300, fps=30, keyframe_every=15)
    single = write_plain_video(tmp_path / "single.mp4", (640, 360), frames=300, fps=30, keyframe_every=300)
    budget = lambda: MediaBudget(MediaSettings(video_max_total_pixels=200 * 640 * 360))  # noqa: E731
    refusal = (r"Sampling the video 1 means decoding 300 frames of 640x360 \(every frame from a keyframe to each sampled one\), "
               r"which takes this request over the 46 million pixels of video this server decodes per request "
               r"\(the video_max_total_pixels setting\)\. Trim it, lower its resolution or frame rate, or re-encode it")
    with pytest.raises(MediaError, match=refusal):
        load_video(str(single), "video 1", 2.0, 32, 256 * 256, budget())
    if reader == "decord":  # it seeks to the keyframe before each of the 20 sampled frames
        assert load_video(str(frequent), "video 1", 2.0, 32, 256 * 256, budget()).frames.shape[0] == 20
    else:
        with pytest.raises(MediaError, match=refusal):
            load_video(str(frequent), "video 1", 2.0, 32, 256 * 256, budget())


@pytest.mark.parametrize("container", ["mp4", "h264"])
def test_a_video_of_very_many_frames_is_refused_before_its_packets_are_all_read(tmp_path, container):
    """100 tiny frames would be 0.3 million pixels, but each counts as at least 128x128. MP4
    declares its frame count; a raw H.264 stream declares nothing, and its packets are read only
    up to the count that is too many."""
    clip = write_plain_video(tmp_path / f"many.{container}", (64, 48), frames=100, fps=100)
    budget = MediaBudget(MediaSettings(video_max_total_pixels=50 * 128 * 128))
    with pytest.raises(MediaError, match=(
        r"The video 1 holds more than 50 frames, more than this server reads per request \(the video_max_total_pixels "
        r"setting counts each frame as at least 128x128 pixels\)\. Trim it or lower its frame rate\.")):
        load_video(str(clip), "video 1", 2.0, 32, 256 * 256, budget)


def test_a_video_longer_than_video_max_seconds_is_refused_from_its_header(tmp_path):
    clip = write_plain_video(tmp_path / "lecture.mp4", (64, 48), frames=700, fps=1)
    with pytest.raises(MediaError, match=r"The video 1 \(lecture.mp4\) is 12 min long; the limit is 10 min \(the video_max_seconds setting\)\. Trim it"):
        load_video(str(clip), "video 1 (lecture.mp4)", 2.0, 32, 256 * 256)


# ---- audio


def test_audio_at_655_khz_on_8_channels_is_refused_from_its_header(bombs):
    decoded = decode_alone(f"load_audio({str(bombs['fast.flac'])!r}, 'audio 1 (fast.flac)', 16000, 30)")
    assert decoded.refusal == (
        "The audio 1 (fast.flac) has 655,350 samples per second; this server reads at most 192,000 "
        "(the audio_max_sample_rate setting). Resample it to 48 kHz or less before sending."
    )
    assert decoded.grown_mib < 20 and decoded.seconds < 1, decoded


def test_audio_of_many_channels_is_refused_from_its_header(tmp_path):
    clip = write_audio(tmp_path / "array.wav", np.zeros((1600, 9), np.float32), 16000)
    with pytest.raises(MediaError, match=r"The audio 1 has 9 channels; this server reads at most 8 \(the audio_max_channels setting\)\. Mix it down"):
        load_audio(str(clip), "audio 1", 16000, 30)


def test_audio_within_the_limits_is_read_a_block_at_a_time(bombs):
    """29 s of 8 channels at 192 kHz are 170 MiB as float32: read, mixed down and resampled a block at a time."""
    decoded = decode_alone(f"load_audio({str(bombs['wide.flac'])!r}, 'audio 1', 16000, 30)")
    assert decoded.shape == (29 * 16000,)
    assert decoded.grown_mib < 40, decoded


def test_the_budget_charges_a_requests_audio_together():
    budget = MediaBudget(MediaSettings(audio_max_total_seconds=50))
    budget.audio("audio 1", 1, 16000, 29, 30, "this model hears at most that much per clip")
    with pytest.raises(MediaError, match=(
        r"The audio of this request comes to 58 s with the audio 2, more than the 50 s this server reads per request "
        r"\(the audio_max_total_seconds setting\), that of earlier messages included\.")):
        budget.audio("audio 2", 1, 16000, 29, 30, "this model hears at most that much per clip")


# ---- through a model: every file's header is read before any file is decoded


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory) -> Path:
    return build_qwen2_vl(tmp_path_factory.mktemp("qwen2_vl"))


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory) -> Path:
    return build_qwen2_audio(tmp_path_factory.mktemp("qwen2_audio"))


def test_images_over_the_request_total_are_refused_before_any_is_decoded(vision_dir, bombs):
    with ChatModel({"model_name_or_path": str(vision_dir), "temperature": 0, "max_new_tokens": 2}) as model:
        started = time.perf_counter()
        with pytest.raises(MediaError, match=r"The images of this request come to 245 million pixels with the image 5 \(near.png\)"):
            model.chat([{"role": "user", "content": QUESTION}], images=[str(bombs["near.png"])] * 5)
        assert time.perf_counter() - started < 2, "an image was decoded"
        [reply] = model.chat([{"role": "user", "content": QUESTION}], images=[solid_image((255, 0, 0))])
        assert reply.response_length >= 1


def test_settings_narrow_what_a_model_reads(audio_dir):
    clip = (tone(20, 16000), 16000)
    with ChatModel({"model_name_or_path": str(audio_dir), "max_new_tokens": 2, "audio_max_total_seconds": 30}) as model:
        with pytest.raises(MediaError, match=r"comes to 40 s with the audio 2, more than the 30 s .*audio_max_total_seconds"):
            model.chat([{"role": "user", "content": QUESTION}], audios=[clip, clip])


# ---- against the real server, while another user chats


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@contextmanager
def peak_growth(pid: int):
    """How far the process's resident memory rose above where it was, while the block ran (MiB)."""
    process = psutil.Process(pid)
    before = process.memory_info().rss
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    grown = {}
    try:
        yield grown
    finally:
        done.set()
        watcher.join()
        grown["mib"] = (peak[0] - before) / 2**20


@dataclass
class Attack:
    outcome: object
    seconds: float
    others_answered_in: float
    grown_mib: float


def attack_while_others_chat(app: AppProcess, attack: Callable[[], object], ordinary: Callable[[], None]) -> Attack:
    """Sends the attack, and meanwhile another user's ordinary request, which must be answered."""
    result = {}

    def attacker() -> None:
        started = time.perf_counter()
        try:
            result["outcome"] = attack()
        finally:
            result["seconds"] = time.perf_counter() - started

    with peak_growth(app.process.pid) as grown:
        thread = threading.Thread(target=attacker)
        thread.start()
        time.sleep(0.2)
        started = time.perf_counter()
        ordinary()
        others = time.perf_counter() - started
        thread.join(timeout=300)
        assert not thread.is_alive(), "the attack is still running after 5 minutes"
    assert others < ANSWERED_WITHIN, f"another user waited {others:.1f} s"
    return Attack(result.get("outcome"), result["seconds"], others, grown["mib"])


@pytest.fixture(scope="module")
def vision_app(tmp_path_factory, vision_dir):
    app = AppProcess(tmp_path_factory.mktemp("vision_app"), ("--backend", "huggingface", "--model", str(vision_dir)))
    yield app
    app.stop()


@pytest.fixture(scope="module")
def audio_app(tmp_path_factory, audio_dir):
    app = AppProcess(tmp_path_factory.mktemp("audio_app"), ("--backend", "huggingface", "--model", str(audio_dir)))
    yield app
    app.stop()


def page_chat(app: AppProcess, text: str, files: list[Path] = ()) -> dict:
    """One /chat from a fresh page session, as gradio_client sends an upload; the last message the page shows."""
    client = Client(app.url, verbose=False, download_files=False)
    try:
        shown = client.predict({"text": text, "files": [handle_file(str(f)) for f in files]}, system="", tools="",
                               temperature=0, max_new_tokens=4, seed=None, api_name="/chat")[0]
    finally:
        client.close()
    return shown[-1]


def answered_on_the_page(app: AppProcess) -> None:
    last = page_chat(app, "Say yes.")
    assert last["role"] == "assistant" and not last["metadata"], last


def refusal(last: dict) -> str:
    assert last["metadata"]["title"] == "⚠ The model could not answer", last
    return "".join(part["text"] for part in last["content"] if part["type"] == "text")


def api_chat(app: AppProcess, parts: list[dict]) -> httpx.Response:
    model = httpx.get(f"{app.url}v1/models", timeout=60).json()["data"][0]["id"]
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}, *parts]}]}
    return httpx.post(f"{app.url}v1/chat/completions", json=body, timeout=300)


def answered_by_the_api(app: AppProcess) -> None:
    answer = api_chat(app, [])
    assert answer.status_code == 200, answer.text


def test_eight_near_limit_uploads_on_the_page_are_refused_at_once(vision_app, bombs, tmp_path):
    uploads = []
    for index in range(8):
        uploads.append(tmp_path / f"near{index}.png")
        uploads[-1].write_bytes(bombs["near.png"].read_bytes())
    attack = attack_while_others_chat(
        vision_app, lambda: refusal(page_chat(vision_app, QUESTION, uploads)), lambda: answered_on_the_page(vision_app)
    )
    print(f"\npage, 8 uploads of 49 million pixels: {attack}")
    assert attack.outcome == (
        "The images of this request come to 245 million pixels with the image 5 (near4.png), more than the 200 million this "
        "server decodes per request (the image_max_total_pixels setting), those of earlier messages included. "
        "Send fewer or smaller images, or start a new chat."
    )
    assert attack.grown_mib < 150 and attack.seconds < 30, attack


def test_images_of_88_million_pixels_as_data_urls_are_refused_at_once(vision_app, bombs):
    huge = {"type": "image_url", "image_url": {"url": data_url("image/png", bombs["huge.png"].read_bytes())}}
    attack = attack_while_others_chat(vision_app, lambda: api_chat(vision_app, [huge] * 8), lambda: answered_by_the_api(vision_app))
    print(f"\n/v1, 8 images of 88 million pixels: {attack}")
    assert attack.outcome.status_code == 400, attack.outcome
    assert "The image 1 is 9400x9400 pixels" in attack.outcome.json()["error"]["message"]
    assert attack.grown_mib < 150 and attack.seconds < 30, attack


def test_audio_at_655_khz_as_a_data_url_is_refused_at_once(audio_app, bombs):
    fast = {"type": "input_audio", "input_audio": {"data": base64.b64encode(bombs["fast.flac"].read_bytes()).decode(), "format": "flac"}}
    attack = attack_while_others_chat(audio_app, lambda: api_chat(audio_app, [fast]), lambda: answered_by_the_api(audio_app))
    print(f"\n/v1, 29 s of 8 channels at 655 kHz: {attack}")
    assert attack.outcome.status_code == 400, attack.outcome
    assert "655,350 samples per second" in attack.outcome.json()["error"]["message"]
    assert attack.grown_mib < 150 and attack.seconds < 30, attack


@pytest.mark.video
@pytest.mark.parametrize("way", ["page", "api"])
def test_a_video_of_10000x10000_frames_is_refused_at_once(vision_app, bombs, way):
    if way == "page":
        send = lambda: refusal(page_chat(vision_app, QUESTION, [bombs["huge.mp4"]]))  # noqa: E731
        ordinary = lambda: answered_on_the_page(vision_app)  # noqa: E731
    else:
        part = {"type": "video_url", "video_url": {"url": data_url("video/mp4", bombs["huge.mp4"].read_bytes())}}
        send = lambda: api_chat(vision_app, [part])  # noqa: E731
        ordinary = lambda: answered_by_the_api(vision_app)  # noqa: E731
    attack = attack_while_others_chat(vision_app, send, ordinary)
    print(f"\n{way}, a video of 10000x10000 frames: {attack}")
    shown = attack.outcome if way == "page" else attack.outcome.json()["error"]["message"]
    assert "has frames of 10000x10000 pixels, larger than the 33 million pixels" in shown, shown
    assert attack.grown_mib < 150 and attack.seconds < 30, attack
