"""Small media files written on the fly for the media tests: images, a video, audio, and bad files."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def solid_image(color: tuple[int, int, int], size: tuple[int, int] = (80, 60)) -> Image.Image:
    return Image.new("RGB", size, color)


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A valid PNG header declaring ``width`` x ``height`` pixels, with almost no data behind it:
    the file is tiny, decoding it would need gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def write_video(path: Path, seconds: float = 3.0, fps: int = 10, size: tuple[int, int] = (64, 48), codec: str = "mpeg4") -> Path:
    """A clip whose frame i is filled with gray level 8*i, so sampled frames can be identified.
    MPEG-4 by default; a browser plays "vp8" (in a .webm file)."""
    import av

    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(int(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), 8 * index, np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def tone(seconds: float, rate: int, channels: int = 1, frequency: float = 440.0) -> np.ndarray:
    """A sine tone, (samples,) or (samples, channels)."""
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
    return wave if channels == 1 else np.stack([wave] * channels, axis=1)


def write_audio(path: Path, samples: np.ndarray, rate: int) -> Path:
    import soundfile

    soundfile.write(str(path), samples, rate)
    return path


def write_long_silence(path: Path, hours: float = 2.0, rate: int = 1000) -> Path:
    """Hours of silence as FLAC: a few hundred KB on disk, written in blocks."""
    import soundfile

    block = np.zeros(rate * 600, dtype=np.float32)
    with soundfile.SoundFile(str(path), "w", samplerate=rate, channels=1, format="FLAC") as audio:
        for _ in range(int(hours * 6)):
            audio.write(block)
    return path
