"""Media regularisation (engines/prompt/media.py) on real files: pillow, decord and PyAV, soundfile, soxr."""

import sys
import time

import numpy as np
import pytest
from PIL import Image

from engines import MediaError
from engines.prompt.media import load_audio, load_image, load_video
from engines.model_files.model_args import MediaSettings
from media_samples import bomb_png, png_bytes, solid_image, tone, write_audio, write_silence, write_video

BUDGET = 768 * 768


# ---- images


@pytest.mark.parametrize("form", ["path", "bytes", "pil"])
def test_image_from_path_bytes_or_pil_becomes_rgb(tmp_path, form):
    gray = Image.new("L", (40, 30), 100)
    path = tmp_path / "gray.png"
    gray.save(path)
    source = {"path": str(path), "bytes": path.read_bytes(), "pil": gray}[form]
    image = load_image(source, "image 1", BUDGET)
    assert image.mode == "RGB" and image.size == (40, 30)
    assert image.getpixel((0, 0)) == (100, 100, 100)


def test_image_is_rotated_by_its_exif_orientation(tmp_path):
    image = solid_image((200, 10, 10), (80, 40))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: shown rotated 90 degrees
    path = tmp_path / "phone.jpg"
    image.save(path, exif=exif)
    assert load_image(str(path), "image 1", BUDGET).size == (40, 80)


def test_transparent_areas_become_white_not_black():
    image = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    assert load_image(image, "image 1", BUDGET).getpixel((5, 5)) == (255, 255, 255)


def test_large_image_is_downscaled_to_the_pixel_budget_keeping_its_shape(tmp_path):
    path = tmp_path / "big.jpg"
    solid_image((0, 128, 255), (2000, 1000)).save(path)
    image = load_image(str(path), "image 1", 100_000)
    width, height = image.size
    assert width * height <= 100_000 and width * height > 90_000
    assert abs(width / height - 2.0) < 0.02


def test_corrupt_image_is_a_clear_error(tmp_path):
    path = tmp_path / "cat.png"
    path.write_bytes(b"this is not a png at all" * 10)
    with pytest.raises(MediaError, match=r"image 1 \(cat.png\) is not an image this app can read.*PNG, JPEG"):
        load_image(str(path), "image 1 (cat.png)", BUDGET)


def test_truncated_image_is_a_clear_error(tmp_path):
    noisy = Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 200, 3), dtype=np.uint8))
    data = png_bytes(noisy)
    with pytest.raises(MediaError, match="damaged or incomplete"):
        load_image(data[: len(data) // 2], "image 1", BUDGET)


def test_zero_byte_and_missing_files_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(MediaError, match="empty file"):
        load_image(str(empty), "image 1", BUDGET)
    with pytest.raises(MediaError, match="empty"):
        load_image(b"", "image 1", BUDGET)
    with pytest.raises(MediaError, match="does not exist"):
        load_image(str(tmp_path / "nowhere.png"), "image 1", BUDGET)


def test_decompression_bomb_is_refused_before_decoding():
    data = bomb_png(30000, 30000)
    assert len(data) < 200
    started = time.perf_counter()
    with pytest.raises(MediaError, match="decompression bomb"):
        load_image(data, "image 1", BUDGET)
    assert time.perf_counter() - started < 2


def test_a_bomb_just_over_the_limit_is_refused_with_its_size():
    side = int((MediaSettings().image_max_source_pixels * 1.5) ** 0.5)  # above our limit, below Pillow's own
    with pytest.raises(MediaError, match=f"{side}x{side} pixels"):
        load_image(bomb_png(side, side), "image 1", BUDGET)


def test_a_file_of_another_kind_says_where_it_belongs(tmp_path):
    song = write_audio(tmp_path / "song.wav", tone(0.5, 8000), 8000)
    with pytest.raises(MediaError, match=r"\.wav is for audio files: pass it with the audios"):
        load_image(str(song), "image 1", BUDGET)


def test_image_of_an_unsupported_type_is_a_clear_error():
    with pytest.raises(MediaError, match="give a file path or bytes, or a PIL image"):
        load_image(12, "image 1", BUDGET)


# ---- video


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """3 s at 10 fps, 64x48; frame i has gray level 8*i."""
    return write_video(tmp_path_factory.mktemp("video") / "clip.mp4")


def _gray_levels(frames: np.ndarray) -> list[int]:
    return [int(round(frame.mean())) for frame in frames]


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_video_frames_are_sampled_at_the_requested_rate(clip, backend, monkeypatch):
    if backend == "pyav":
        monkeypatch.setitem(sys.modules, "decord", None)  # decord missing: PyAV is the fallback
    video = load_video(str(clip), "video 1", fps=2, max_frames=32, max_pixels=BUDGET)
    assert video.frames.shape == (6, 48, 64, 3) and video.frames.dtype == np.uint8
    assert video.metadata["total_num_frames"] == 30 and video.metadata["fps"] == pytest.approx(10)
    assert video.metadata["video_backend"] == backend
    # Spread over the whole clip, first and last frame included (gray 8*index, codec noise aside).
    assert video.metadata["frames_indices"] == [0, 6, 12, 17, 23, 29]
    levels = _gray_levels(video.frames)
    assert levels == sorted(levels) and abs(levels[0] - 0) <= 4 and abs(levels[-1] - 8 * 29) <= 4


def test_video_frame_count_and_size_are_capped(clip):
    video = load_video(clip.read_bytes(), "video 1", fps=10, max_frames=4, max_pixels=32 * 24)
    assert video.frames.shape == (4, 24, 32, 3)
    assert video.metadata["frames_indices"] == [0, 10, 19, 29]


def test_a_list_of_frames_is_taken_as_sampled():
    frames = [solid_image((i * 40, 0, 0), (20, 10)) for i in range(3)] + [np.zeros((10, 20, 3), np.uint8)]
    video = load_video(frames, "video 1", fps=2, max_frames=32, max_pixels=BUDGET)
    assert video.frames.shape == (4, 10, 20, 3)
    assert video.metadata == {"total_num_frames": 4, "fps": 2, "frames_indices": [0, 1, 2, 3]}


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_unreadable_video_is_a_clear_error(tmp_path, backend, monkeypatch):
    if backend == "pyav":
        monkeypatch.setitem(sys.modules, "decord", None)
    broken = tmp_path / "holiday.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 200)
    with pytest.raises(MediaError, match=r"could not be opened as a video.*MP4, WebM"):
        load_video(str(broken), "video 1 (holiday.mp4)", fps=2, max_frames=8, max_pixels=BUDGET)


def test_an_image_sent_as_video_says_where_it_belongs(tmp_path):
    photo = tmp_path / "photo.png"
    solid_image((1, 2, 3)).save(photo)
    with pytest.raises(MediaError, match=r"\.png is for image files: pass it with the images"):
        load_video(str(photo), "video 1", fps=2, max_frames=8, max_pixels=BUDGET)


def test_zero_byte_video_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(MediaError, match="empty file"):
        load_video(str(empty), "video 1", fps=2, max_frames=8, max_pixels=BUDGET)


# ---- audio


def test_stereo_audio_file_becomes_mono_at_the_model_rate(tmp_path):
    path = write_audio(tmp_path / "tone.wav", tone(1.5, 44100, channels=2), 44100)
    samples = load_audio(str(path), "audio 1", 16000, 600)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert len(samples) == pytest.approx(24000, abs=2)
    # Resampled, not cut or stretched: still a 440 Hz tone.
    spectrum = np.abs(np.fft.rfft(samples))
    assert np.argmax(spectrum) * 16000 / len(samples) == pytest.approx(440, abs=2)


def test_audio_from_bytes_array_tuple_and_dict(tmp_path):
    path = write_audio(tmp_path / "tone.flac", tone(1.0, 16000), 16000)
    from_bytes = load_audio(path.read_bytes(), "audio 1", 16000, 600)
    from_tuple = load_audio((tone(1.0, 8000), 8000), "audio 1", 16000, 600)
    from_dict = load_audio({"array": tone(1.0, 16000, channels=2).T, "sampling_rate": 16000}, "audio 1", 16000, 600)
    assert len(from_bytes) == len(from_tuple) == len(from_dict) == 16000


def test_audio_without_a_sample_rate_is_a_clear_error():
    with pytest.raises(MediaError, match=r"give \(samples, sample_rate\)"):
        load_audio(tone(1.0, 16000), "audio 1", 16000, 600)


def test_two_hour_audio_is_refused_from_its_header(tmp_path):
    path = write_silence(tmp_path / "lecture.flac", seconds=2 * 3600, rate=1000)
    started = time.perf_counter()
    with pytest.raises(MediaError, match=r"audio 1 is 2\.0 h long; the limit is 10 min \(the audio_max_seconds setting\)"):
        load_audio(str(path), "audio 1", 16000, 600)
    assert time.perf_counter() - started < 1


def test_long_audio_array_is_refused():
    with pytest.raises(MediaError, match="is 20 s long; the limit is 10 s"):
        load_audio((np.zeros(20 * 8000, np.float32), 8000), "audio 1", 16000, 10)


def test_unreadable_and_empty_audio_are_clear_errors(tmp_path):
    fake = tmp_path / "voice.ogg"
    fake.write_bytes(b"not audio" * 50)
    with pytest.raises(MediaError, match="not an audio file this app can read.*WAV, FLAC"):
        load_audio(str(fake), "audio 1", 16000, 600)
    photo = tmp_path / "photo.jpg"
    solid_image((0, 0, 0)).save(photo)
    with pytest.raises(MediaError, match=r"\.jpg is for image files: pass it with the images"):
        load_audio(str(photo), "audio 1", 16000, 600)
    with pytest.raises(MediaError, match="empty"):
        load_audio(b"", "audio 1", 16000, 600)
