"""Media regularisation, the same for every engine: whatever the caller gives (a path, bytes, a
PIL image, frames, samples) becomes an RGB image, sampled video frames, or mono audio at the
model's rate, or a MediaError that names the file and says what to do.

Each file is read in two steps: ``open_*`` reads its header and charges it to the request's
MediaBudget (engines/prompt/media_budget.py), so that a request whose files are too big, too long or
too many is refused before any of them is decoded; ``read()`` then decodes it, at the size the
model needs rather than the size it is stored at, and never holding more than one full-size
picture (or one block of audio) at a time. ``load_*`` do both for one file.

Heavy decoders (pillow, PyAV / decord, soundfile, soxr) are imported when first needed.
"""

from __future__ import annotations

import bisect
import io
import math
import os
import re
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from ..errors import MediaError
from .media_budget import MediaBudget

# A path, raw bytes, or a PIL.Image.Image.
ImageInput = Union[str, os.PathLike, bytes, Any]
# A path, raw bytes, or a list of frames (PIL images or HxWx3 uint8 arrays).
VideoInput = Union[str, os.PathLike, bytes, list, Any]
# A path, raw bytes, (samples, sample rate), or {"array": samples, "sampling_rate": rate}.
AudioInput = Union[str, os.PathLike, bytes, tuple, dict, Any]


# Each medium's file names, for the engine's hints and the page's uploads alike (a file is read
# by its content; a name only sorts it into its kind).
MEDIA_EXTENSIONS = {
    "image": (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".heic", ".avif"),
    "video": (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv"),
    "audio": (".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".aiff"),
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
    for other, suffixes in MEDIA_EXTENSIONS.items():
        if other != kind and suffix in suffixes:
            return f" Its extension {suffix} is for {other} files: pass it with the {other}s, not the {kind}s."
    return ""


# ---- images


def load_image(source: ImageInput, name: str, max_pixels: int, budget: MediaBudget | None = None) -> Any:
    """An RGB PIL image, EXIF-rotated, transparent areas on white, at most ``max_pixels`` pixels."""
    return open_image(source, name, max_pixels, budget or MediaBudget()).read()


@dataclass
class ImageFile:
    """An image whose header is read (and charged), not yet decoded."""

    image: Any
    name: str
    max_pixels: int
    from_file: bool = True

    def read(self) -> Any:
        from PIL import ImageOps

        image = self.image
        try:
            image.load()
            # Downscaled before anything else, so that only the decoded picture is ever full size.
            if image.mode in ("1", "P", "PA"):  # palette images resize only to nearest neighbours
                image = _to_rgb(image)
            image = _shrink(image, self.max_pixels)
            image = ImageOps.exif_transpose(image)
        except (OSError, SyntaxError, ValueError) as error:
            raise MediaError(
                f"The {self.name} could not be decoded ({_reason(error)}): the file is damaged or incomplete. "
                "Upload it again or export it anew."
            ) from None
        return _to_rgb(image)

    def close(self) -> None:
        """Let go of the file of an image that will not be read (an image given as a PIL image stays the caller's)."""
        if self.from_file:
            self.image.close()


def open_image(source: ImageInput, name: str, max_pixels: int, budget: MediaBudget) -> ImageFile:
    """The image's header, its size charged to ``budget``. A PIL image is taken as it is."""
    from PIL import Image

    if isinstance(source, Image.Image):
        return ImageFile(source, name, max_pixels, from_file=False)
    readable = _read_source("image", name, source)
    try:
        image = Image.open(readable)
    except Image.DecompressionBombError:
        # Pillow's own guard, for sizes far beyond ours: it refuses them before we see the size.
        raise budget.image_too_large(name) from None
    except (OSError, SyntaxError, ValueError):
        raise MediaError(
            f"The {name} is not an image this app can read. "
            f"Send a PNG, JPEG, GIF, BMP or WebP file.{_wrong_kind_hint('image', source)}"
        ) from None
    declared = image.size
    # JPEG can decode at a fraction of its size, which saves most of the work for big photos.
    target = _fit(*declared, max_pixels)
    if target != declared:
        image.draft("RGB", target)
    try:
        budget.image(name, declared, image.size)
    except MediaError:
        image.close()
        raise
    return ImageFile(image, name, max_pixels)


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


def _shrink(image: Any, max_pixels: int) -> Any:
    from PIL import Image

    target = _fit(*image.size, max_pixels)
    # reducing_gap: a fast integer reduction first, as Image.thumbnail does, then the fine resize.
    return image if target == image.size else image.resize(target, Image.Resampling.BICUBIC, reducing_gap=2.0)


def _reason(error: BaseException) -> str:
    return str(error).strip().rstrip(".") or type(error).__name__


# ---- video


def load_video(source: VideoInput, name: str, fps: float, max_frames: int, max_pixels: int,
               budget: MediaBudget | None = None) -> Video:
    """Frames sampled at ``fps`` (at most ``max_frames``, spread over the whole video), each
    downscaled to ``max_pixels``. A list of frames is taken as already sampled at ``fps``."""
    return open_video(source, name, fps, max_frames, max_pixels, budget or MediaBudget()).read()


@dataclass
class VideoFile:
    """A video whose header and packet index are read (and charged), and the frames to sample."""

    readable: io.BytesIO | str
    name: str
    source: Any
    total: int
    fps: float
    indices: list[int]
    size: tuple[int, int]
    max_source_pixels: int

    def close(self) -> None:
        """Nothing is held open between reading the header and decoding."""

    def read(self) -> Video:
        if isinstance(self.readable, io.BytesIO):
            self.readable.seek(0)
        if _has_decord():
            frames, backend = self._read_with_decord(), "decord"
        else:
            frames, backend = self._read_with_pyav(), "pyav"
        metadata = {"total_num_frames": self.total, "fps": self.fps, "frames_indices": self.indices, "video_backend": backend}
        return Video(frames, metadata)

    def _read_with_decord(self) -> np.ndarray:
        import decord

        try:
            # decord scales each frame as it is decoded: the full-size frames never reach memory.
            reader = decord.VideoReader(self.readable, ctx=decord.cpu(0), width=self.size[0], height=self.size[1], num_threads=1)
            last = len(reader) - 1
            return reader.get_batch([min(index, last) for index in self.indices]).asnumpy()
        except Exception as error:  # decord raises its own DECORDError (a RuntimeError) and others
            raise _unreadable_video(self.name, self.source, error) from None

    def _read_with_pyav(self) -> np.ndarray:
        wanted = set(self.indices)
        kept: dict[int, np.ndarray] = {}
        width, height = self.size
        try:
            with _open_container(self.readable, self.max_source_pixels) as container:
                stream = container.streams.video[0]
                # Read from the start (PyAV does not seek here); each sampled frame is scaled as it is
                # converted, the others are dropped as they come.
                for position, frame in enumerate(container.decode(stream)):
                    if position in wanted:
                        kept[position] = frame.to_ndarray(width=width, height=height, format="rgb24", interpolation="AREA")
                    if position >= self.indices[-1]:
                        break
        except Exception as error:  # av.error.* and codec errors
            raise _unreadable_video(self.name, self.source, error) from None
        if not kept:
            raise MediaError(f"The {self.name} has no video frames.")
        # A header that counted more frames than the stream holds: the last frames stand in.
        return np.stack([kept[max(i for i in kept if i <= index)] for index in self.indices])


def open_video(source: VideoInput, name: str, fps: float, max_frames: int, max_pixels: int, budget: MediaBudget) -> FrameList | VideoFile:
    """The video's header and packet index (no frame decoded), its size, length and the decoding
    its sampled frames take charged to ``budget``."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise MediaError(f"The {name} is an empty list of frames.")
        return FrameList([_frame_image(frame, name) for frame in source], fps, max_pixels)
    readable = _read_source("video", name, source)
    max_source_pixels = budget.settings.video_max_source_pixels
    try:
        with _open_container(readable, max_source_pixels) as container:
            if not container.streams.video:
                raise _unreadable_video(name, source, "it holds no video stream")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            native_fps = float(stream.average_rate or stream.guessed_rate or fps)
            declared = stream.frames or int(float(stream.duration * stream.time_base) * native_fps if stream.duration else 0)
            # Checked from the header first, so that the packets of an absurdly long video are not read.
            budget.video(name, width, height, declared / native_fps)
            budget.video_frames(name, declared)
            keyframes, total = _packet_index(container, stream, budget.most_video_frames + 1)
    except MediaError:
        raise
    except Exception as error:  # av.error.* and codec errors
        raise _unreadable_video(name, source, error) from None
    if total == 0 or not width or not height:
        raise MediaError(f"The {name} has no video frames.")
    # The frames counted, where the header said fewer or nothing.
    budget.video(name, width, height, total / native_fps)
    budget.video_frames(name, total)
    indices = _sample_indices(total, native_fps, fps, max_frames)
    budget.video_decoding(name, _frames_decoded(keyframes, indices, seeks=_has_decord()), width, height)
    return VideoFile(readable, name, source, total, native_fps, indices, _fit(width, height, max_pixels), max_source_pixels)


@dataclass
class FrameList:
    """Frames the caller decoded already, taken as sampled."""

    frames: list
    fps: float
    max_pixels: int

    def close(self) -> None:
        """The frames are the caller's."""

    def read(self) -> Video:
        frames = _same_size([_shrink(_to_rgb(frame), self.max_pixels) for frame in self.frames])
        metadata = {"total_num_frames": len(frames), "fps": self.fps, "frames_indices": list(range(len(frames)))}
        return Video(np.stack([np.asarray(frame) for frame in frames]), metadata)


def _has_decord() -> bool:
    """decord first where installed: it seeks straight to the sampled frames."""
    try:
        import decord  # noqa: F401
    except ImportError:
        return False
    return True


def _open_container(readable: io.BytesIO | str, max_pixels: int) -> Any:
    """A PyAV container whose decoders refuse frames over ``max_pixels``: reading the header
    decodes a frame or two, and a stream may change its size after the header."""
    try:
        import av
    except ImportError:
        raise MediaError("Reading video needs PyAV: pip install av.") from None
    return av.open(readable, options={"max_pixels": str(max_pixels)})


def _packet_index(container: Any, stream: Any, most: int) -> tuple[list[int], int]:
    """The positions of the keyframes among the frames in showing order, and the frame count,
    from the packets alone (nothing is decoded); reading stops after ``most`` frames."""
    packets = []
    for packet in container.demux(stream):
        if packet.size:
            packets.append((packet.pts, packet.is_keyframe))
            if len(packets) >= most:
                break
    order = sorted(range(len(packets)), key=lambda i: (packets[i][0] is None, packets[i][0] or 0, i))
    keyframes = [position for position, i in enumerate(order) if packets[i][1]]
    return keyframes or [0], len(packets)


def _sample_indices(total_frames: int, native_fps: float, fps: float, max_frames: int) -> list[int]:
    """``fps`` frames per second of video, at most ``max_frames``, spread over the whole of it."""
    duration = total_frames / native_fps if native_fps > 0 else total_frames / fps
    count = max(1, min(max_frames, total_frames, math.floor(duration * fps)))
    return np.linspace(0, total_frames - 1, count).round().astype(int).tolist()


def _frames_decoded(keyframes: list[int], indices: list[int], seeks: bool) -> int:
    """How many frames a reader decodes to reach ``indices``: from the start when it does not
    seek; else, as decord does, from each frame's keyframe unless it is reading that stretch already."""
    if not seeks:
        return indices[-1] + 1
    decoded, position = 0, -1
    for index in indices:
        keyframe = keyframes[max(0, bisect.bisect_right(keyframes, index) - 1)]
        start = position + 1 if keyframe <= position < index else min(keyframe, index)
        decoded += index - start + 1
        position = index
    return decoded


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


# decord's messages start with its log prefix and C++ source place ("[12:19:10] /src/video/video_reader.cc:83: ").
_DECODER_LOG_PREFIX = re.compile(r"\[[\d:]+\] \S+:\d+: ")
# How Python names an in-memory file in a decoder's message.
_IN_MEMORY_FILE = re.compile(r"<_io\.BytesIO object at 0x[0-9a-f]+>")


def _decoder_reason(error: BaseException, source: Any) -> str:
    """A decoder's reason, without its log prefix or the file's path on the server (the message names the file)."""
    reason = _IN_MEMORY_FILE.sub("the file", _DECODER_LOG_PREFIX.sub("", _reason(error)))
    return reason.replace(os.fspath(source), Path(source).name) if isinstance(source, (str, os.PathLike)) else reason


def _unreadable_video(name: str, source: Any, error: BaseException | str) -> MediaError:
    reason = error if isinstance(error, str) else _decoder_reason(error, source)
    return MediaError(
        f"The {name} could not be opened as a video ({reason[:200]}). "
        f"Send an MP4, WebM, MKV, AVI or MOV file.{_wrong_kind_hint('video', source)}"
    )


# ---- audio

# Frames read and mixed down at a time: memory stays at one block, however many channels.
_AUDIO_BLOCK = 1 << 16


def load_audio(source: AudioInput, name: str, sampling_rate: int, max_seconds: float,
               limit: str = "the audio_max_seconds setting", budget: MediaBudget | None = None) -> np.ndarray:
    """Mono float32 samples at ``sampling_rate``. Audio longer than ``max_seconds`` is refused
    before it is decoded; ``limit`` says where that maximum comes from."""
    return open_audio(source, name, sampling_rate, max_seconds, limit, budget or MediaBudget()).read()


@dataclass
class AudioFile:
    """Audio whose header is read (and charged): a file, or samples already in memory."""

    readable: io.BytesIO | str | None
    name: str
    source: Any
    sampling_rate: int
    samples: np.ndarray | None = None
    rate: int = 0

    def close(self) -> None:
        """Nothing is held open between reading the header and decoding."""

    def read(self) -> np.ndarray:
        if self.samples is not None:
            return _mono_at_rate(_blocks_of(self.samples), self.rate, self.sampling_rate)
        import soundfile

        if isinstance(self.readable, io.BytesIO):
            self.readable.seek(0)
        try:
            with soundfile.SoundFile(self.readable) as audio:
                blocks = audio.blocks(blocksize=_AUDIO_BLOCK, dtype="float32", always_2d=True)
                return _mono_at_rate(blocks, audio.samplerate, self.sampling_rate)
        except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
            raise _unreadable_audio(self.name, self.source, error) from None


def open_audio(source: AudioInput, name: str, sampling_rate: int, max_seconds: float, limit: str, budget: MediaBudget) -> AudioFile:
    """The audio's header (or the samples given), its channels, rate and length charged to
    ``budget``, to be read at ``sampling_rate``; longer than ``max_seconds`` is refused, ``limit``
    saying where that comes from."""
    if isinstance(source, dict) and "array" in source:
        source = (source["array"], source.get("sampling_rate"))
    if isinstance(source, tuple):
        samples, rate = _samples_and_rate(source, name)
        budget.audio(name, samples.shape[1] if samples.ndim == 2 else 1, rate, len(samples) / rate, max_seconds, limit)
        return AudioFile(None, name, source, sampling_rate, samples, rate)
    if isinstance(source, np.ndarray):
        raise MediaError(
            f"The {name} is a bare array; give (samples, sample_rate) so its rate is known, e.g. (array, 16000)."
        )
    readable = _read_source("audio", name, source)
    import soundfile

    try:
        info = soundfile.info(readable)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        raise _unreadable_audio(name, source, error) from None
    if info.frames <= 0:
        raise MediaError(f"The {name} holds no audio samples.")
    budget.audio(name, info.channels, info.samplerate, info.frames / info.samplerate, max_seconds, limit)
    return AudioFile(readable, name, source, sampling_rate)


def _blocks_of(samples: np.ndarray) -> Any:
    samples = samples if samples.ndim == 2 else samples[:, None]
    return (samples[start:start + _AUDIO_BLOCK] for start in range(0, len(samples), _AUDIO_BLOCK))


def _mono_at_rate(blocks: Any, rate: int, sampling_rate: int) -> np.ndarray:
    """Blocks of (frames, channels) samples mixed down to mono and resampled as they come."""
    import soxr

    resampler = soxr.ResampleStream(rate, sampling_rate, 1, dtype="float32") if rate != sampling_rate else None
    pieces = []
    for block in blocks:
        mono = block.mean(axis=1, dtype=np.float32)
        pieces.append(resampler.resample_chunk(mono) if resampler else mono)
    if resampler:
        pieces.append(resampler.resample_chunk(np.zeros(0, np.float32), last=True))
    return np.concatenate(pieces).astype(np.float32, copy=False)


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


def _unreadable_audio(name: str, source: Any, error: BaseException) -> MediaError:
    return MediaError(
        f"The {name} is not an audio file this app can read ({_decoder_reason(error, source)}). "
        f"Send a WAV, FLAC, OGG or MP3 file.{_wrong_kind_hint('audio', source)}"
    )


def wav_bytes(samples: Any, sample_rate: int) -> bytes:
    """Mono float samples as a 16-bit WAV file."""
    pcm = (np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()
