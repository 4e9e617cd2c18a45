"""Media regularisation, the same for every engine: whatever the caller gives (a path, bytes, a
PIL image, frames, samples) becomes an RGB image, sampled video frames, or mono audio at the
model's rate, or a MediaError that names the file and says what to do.

Heavy decoders (pillow, decord / PyAV, soundfile, soxr) are imported when first needed.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from .errors import MediaError

# A path, raw bytes, or a PIL.Image.Image.
ImageInput = Union[str, os.PathLike, bytes, Any]
# A path, raw bytes, or a list of frames (PIL images or HxWx3 uint8 arrays).
VideoInput = Union[str, os.PathLike, bytes, list, Any]
# A path, raw bytes, (samples, sample rate), or {"array": samples, "sampling_rate": rate}.
AudioInput = Union[str, os.PathLike, bytes, tuple, dict, Any]

PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}

_EXTENSIONS = {
    "image": {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".heic", ".avif"},
    "video": {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv"},
    "audio": {".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".aiff"},
}


@dataclass(frozen=True)
class Video:
    """Sampled frames (T, H, W, 3 uint8) and what the processor needs to know about them."""

    frames: np.ndarray
    metadata: dict[str, Any]


def describe(kind: str, index: int, source: Any) -> str:
    """How error messages name a file: its name when it has one, else its position."""
    if isinstance(source, (str, os.PathLike)):
        return f"{kind} {index + 1} ({Path(source).name})"
    return f"{kind} {index + 1}"


def _read_source(kind: str, name: str, source: Any) -> io.BytesIO | str:
    """A path or bytes, checked to exist and to be non-empty."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise MediaError(f"The {name} is empty (0 bytes). Upload the file again.")
        return io.BytesIO(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise MediaError(f"The {name} does not exist: no file at {path}.")
        if os.path.getsize(path) == 0:
            raise MediaError(f"The {name} is an empty file (0 bytes). Upload the file again.")
        return path
    raise MediaError(
        f"The {name} is a {type(source).__name__}; give a file path or bytes"
        + (", or a PIL image." if kind == "image" else ".")
    )


def _wrong_kind_hint(kind: str, source: Any) -> str:
    """For a file that failed to decode, a hint when its extension says it is another kind."""
    if not isinstance(source, (str, os.PathLike)):
        return ""
    suffix = Path(source).suffix.lower()
    for other, suffixes in _EXTENSIONS.items():
        if other != kind and suffix in suffixes:
            return f" Its extension {suffix} is for {other} files: pass it with the {other}s, not the {kind}s."
    return ""


# ---- images


def load_image(source: ImageInput, name: str, max_pixels: int) -> Any:
    """An RGB PIL image, EXIF-rotated, transparent areas on white, at most ``max_pixels`` pixels."""
    from PIL import Image, ImageOps

    if isinstance(source, Image.Image):
        image = source
    else:
        readable = _read_source("image", name, source)
        try:
            image = Image.open(readable)
        except Image.DecompressionBombError:
            raise MediaError(_bomb_message(name)) from None
        except (OSError, SyntaxError, ValueError):
            raise MediaError(
                f"The {name} is not an image this app can read. "
                f"Send a PNG, JPEG, GIF, BMP or WebP file.{_wrong_kind_hint('image', source)}"
            ) from None
    width, height = image.size
    # Checked before decoding: a small file can declare billions of pixels.
    if width * height > Image.MAX_IMAGE_PIXELS:
        raise MediaError(_bomb_message(name, width, height))
    try:
        # JPEG can decode at a fraction of its size, which saves most of the work for big photos.
        target = _fit(width, height, max_pixels)
        if target != (width, height):
            image.draft("RGB", target)
        image.load()
        image = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError) as error:
        raise MediaError(
            f"The {name} could not be decoded ({_reason(error)}): the file is damaged or incomplete. "
            "Upload it again or export it anew."
        ) from None
    image = _to_rgb(image)
    target = _fit(*image.size, max_pixels)
    if target != image.size:
        image = image.resize(target, Image.Resampling.BICUBIC)
    return image


def _bomb_message(name: str, width: int | None = None, height: int | None = None) -> str:
    from PIL import Image

    size = f" is {width}x{height} pixels, which" if width else ""
    return (
        f"The {name}{size} is larger than the {Image.MAX_IMAGE_PIXELS / 1e6:.0f} million pixels this app decodes "
        "(a guard against decompression bombs). Downscale it before sending."
    )


def _to_rgb(image: Any) -> Any:
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # A plain convert("RGB") paints transparent pixels black, often hiding dark content.
        image = image.convert("RGBA")
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, image).convert("RGB")
    return image.convert("RGB") if image.mode != "RGB" else image


def _fit(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The size within ``max_pixels`` that keeps the aspect ratio (unchanged when it fits)."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def _reason(error: BaseException) -> str:
    return str(error).strip().rstrip(".") or type(error).__name__


# ---- video


def load_video(source: VideoInput, name: str, fps: float, max_frames: int, max_pixels: int) -> Video:
    """Frames sampled at ``fps`` (at most ``max_frames``, spread over the whole video), each
    downscaled to ``max_pixels``. A list of frames is taken as already sampled at ``fps``."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise MediaError(f"The {name} is an empty list of frames.")
        frames = [load_image(_frame_image(frame, name), name, max_pixels) for frame in source]
        metadata = {"total_num_frames": len(frames), "fps": fps, "frames_indices": list(range(len(frames)))}
        return Video(np.stack([np.asarray(frame) for frame in _same_size(frames)]), metadata)
    readable = _read_source("video", name, source)
    try:
        import decord  # noqa: F401  (decord first: it seeks straight to the sampled frames)
    except ImportError:
        raw, metadata = _read_with_pyav(readable, name, source, fps, max_frames)
    else:
        raw, metadata = _read_with_decord(readable, name, source, fps, max_frames)
    from PIL import Image

    frames = [_shrink(Image.fromarray(frame), max_pixels) for frame in raw]
    return Video(np.stack([np.asarray(frame) for frame in frames]), metadata)


def _frame_image(frame: Any, name: str) -> Any:
    from PIL import Image

    if not isinstance(frame, np.ndarray):
        return frame
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or frame.dtype != np.uint8:
        raise MediaError(f"The {name} has a frame of shape {frame.shape} ({frame.dtype}); frames must be HxWx3 uint8 arrays.")
    return Image.fromarray(frame)


def _same_size(frames: list) -> list:
    size = frames[0].size
    return [frame if frame.size == size else frame.resize(size) for frame in frames]


def _shrink(image: Any, max_pixels: int) -> Any:
    from PIL import Image

    target = _fit(*image.size, max_pixels)
    return image if target == image.size else image.resize(target, Image.Resampling.BICUBIC)


def _sample_count(total_frames: int, native_fps: float, fps: float, max_frames: int) -> int:
    duration = total_frames / native_fps if native_fps > 0 else total_frames / fps
    return max(1, min(max_frames, total_frames, math.floor(duration * fps)))


# decord's messages start with its log prefix and C++ source place ("[12:19:10] /src/video/video_reader.cc:83: ").
_DECODER_LOG_PREFIX = re.compile(r"\[[\d:]+\] \S+:\d+: ")


def _decoder_reason(error: BaseException, source: Any) -> str:
    """A decoder's reason, without its log prefix or the file's path on the server (the message names the file)."""
    reason = _DECODER_LOG_PREFIX.sub("", _reason(error))
    return reason.replace(os.fspath(source), Path(source).name) if isinstance(source, (str, os.PathLike)) else reason


def _unreadable_video(name: str, source: Any, error: BaseException) -> MediaError:
    reason = _decoder_reason(error, source)
    return MediaError(
        f"The {name} could not be opened as a video ({reason[:200]}). "
        f"Send an MP4, WebM, MKV, AVI or MOV file.{_wrong_kind_hint('video', source)}"
    )


def _read_with_decord(readable, name, source, fps, max_frames) -> tuple[np.ndarray, dict[str, Any]]:
    import decord

    try:
        reader = decord.VideoReader(readable, ctx=decord.cpu(0), num_threads=1)
        total, native_fps = len(reader), float(reader.get_avg_fps())
        if total == 0:
            raise MediaError(f"The {name} has no video frames.")
        count = _sample_count(total, native_fps, fps, max_frames)
        indices = np.linspace(0, total - 1, count).round().astype(int).tolist()
        frames = reader.get_batch(indices).asnumpy()
    except MediaError:
        raise
    except Exception as error:  # decord raises its own DECORDError (a RuntimeError) and others
        raise _unreadable_video(name, source, error) from None
    return frames, {"total_num_frames": total, "fps": native_fps, "frames_indices": indices, "video_backend": "decord"}


def _read_with_pyav(readable, name, source, fps, max_frames) -> tuple[np.ndarray, dict[str, Any]]:
    try:
        import av
    except ImportError:
        raise MediaError("Reading video needs decord or PyAV: pip install decord (or pip install av).") from None
    try:
        with av.open(readable) as container:
            if not container.streams.video:
                raise MediaError(f"The {name} has no video stream.{_wrong_kind_hint('video', source)}")
            stream = container.streams.video[0]
            native_fps = float(stream.average_rate or fps)
            # PyAV cannot always tell the frame count without decoding; the frames are decoded
            # once and sampled from memory as small RGB arrays.
            decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    except MediaError:
        raise
    except Exception as error:  # av.error.* and codec errors
        raise _unreadable_video(name, source, error) from None
    if not decoded:
        raise MediaError(f"The {name} has no video frames.")
    count = _sample_count(len(decoded), native_fps, fps, max_frames)
    indices = np.linspace(0, len(decoded) - 1, count).round().astype(int).tolist()
    metadata = {"total_num_frames": len(decoded), "fps": native_fps, "frames_indices": indices, "video_backend": "pyav"}
    return np.stack([decoded[i] for i in indices]), metadata


# ---- audio


def load_audio(
    source: AudioInput, name: str, sampling_rate: int, max_seconds: float, limit: str = "the audio_max_seconds setting"
) -> np.ndarray:
    """Mono float32 samples at ``sampling_rate``. Audio longer than ``max_seconds`` is refused
    before it is decoded; ``limit`` says where that maximum comes from."""
    if isinstance(source, dict) and "array" in source:
        source = (source["array"], source.get("sampling_rate"))
    if isinstance(source, tuple):
        samples, rate = _samples_and_rate(source, name)
        _check_duration(name, len(samples) / rate, max_seconds, limit)
    else:
        if isinstance(source, np.ndarray):
            raise MediaError(
                f"The {name} is a bare array; give (samples, sample_rate) so its rate is known, e.g. (array, 16000)."
            )
        samples, rate = _read_audio_file(_read_source("audio", name, source), name, source, max_seconds, limit)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    samples = samples.astype(np.float32, copy=False)
    if rate != sampling_rate:
        import soxr

        samples = soxr.resample(samples, rate, sampling_rate).astype(np.float32, copy=False)
    return samples


def _samples_and_rate(source: tuple, name: str) -> tuple[np.ndarray, int]:
    if len(source) != 2 or not isinstance(source[1], (int, float)) or source[1] <= 0:
        raise MediaError(f"The {name} must be (samples, sample_rate) with a positive rate, like (array, 16000).")
    samples = np.asarray(source[0])
    if samples.ndim == 2 and samples.shape[0] < samples.shape[1]:
        samples = samples.T  # (channels, samples), as torchaudio and librosa give it
    if samples.ndim not in (1, 2) or samples.size == 0 or not np.issubdtype(samples.dtype, np.number):
        raise MediaError(f"The {name} has {samples.shape} {samples.dtype} samples; give a 1-D (or channels x samples) numeric array.")
    if np.issubdtype(samples.dtype, np.integer):
        samples = samples / float(np.iinfo(samples.dtype).max)
    return samples, int(source[1])


def _read_audio_file(readable, name: str, source: Any, max_seconds: float, limit: str) -> tuple[np.ndarray, int]:
    import soundfile

    try:
        with soundfile.SoundFile(readable) as audio:
            if audio.frames <= 0:
                raise MediaError(f"The {name} holds no audio samples.")
            _check_duration(name, audio.frames / audio.samplerate, max_seconds, limit)
            return audio.read(dtype="float32", always_2d=True), audio.samplerate
    except MediaError:
        raise
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        raise MediaError(
            f"The {name} is not an audio file this app can read ({_decoder_reason(error, source)}). "
            f"Send a WAV, FLAC, OGG or MP3 file.{_wrong_kind_hint('audio', source)}"
        ) from None


def _check_duration(name: str, seconds: float, max_seconds: float, limit: str) -> None:
    if seconds > max_seconds:
        raise MediaError(
            f"The {name} is {_duration(seconds)} long; the limit is {_duration(max_seconds)} ({limit}). "
            "Trim it or send a shorter clip."
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
