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


def write_silence(path: Path, seconds: float, rate: int, channels: int = 1) -> Path:
    """Silence as FLAC, written a minute at a time: hours of it, or many channels at a high
    rate, fit in a few hundred KB on disk."""
    import soundfile

    with soundfile.SoundFile(str(path), "w", samplerate=rate, channels=channels, format="FLAC") as audio:
        left = round(seconds * rate)
        while left > 0:
            frames = min(left, rate * 60)
            audio.write(np.zeros((frames, channels), dtype=np.float32))
            left -= frames
    return path


def flat_png(width: int, height: int, alpha: bool = False) -> bytes:
    """A valid PNG of ``width`` x ``height`` gray pixels (opaque, RGBA or RGB): a few hundred KB
    that decode into hundreds of MB. Compressed a row at a time, so making it needs no such memory."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + (b"\x80\x80\x80\xff" if alpha else b"\x80\x80\x80") * width  # filter byte, then the pixels
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 6 if alpha else 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def write_plain_video(path: Path, size: tuple[int, int], frames: int, fps: int = 10, keyframe_every: int | None = None) -> Path:
    """An H.264 clip of one gray picture: small and quick to write at any frame size, with a
    keyframe every ``keyframe_every`` frames (x264's own choice when None)."""
    import av

    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", **({"g": str(keyframe_every), "keyint_min": str(keyframe_every)} if keyframe_every else {})}
        picture = av.VideoFrame(width, height, "yuv420p")
        for plane in picture.planes:
            plane.update(bytes([128]) * plane.buffer_size)
        for index in range(frames):
            picture.pts = index
            container.mux(stream.encode(picture))
        container.mux(stream.encode())
    return path
