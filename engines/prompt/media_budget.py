"""What one request's media may make the server decode, checked before anything is decoded.

A small file can declare a huge picture, hours of video or a thousand audio channels, and a
request can hold many files that are each just within their limits. Every file's header is read
first and charged here: its own size and length, and the request's totals (counts, pixels,
seconds). A file over any limit is refused, before its own decoding starts, with a message that
names it, the limit and the setting that sets it (engines.model_args.MediaSettings).
"""

from __future__ import annotations

from typing import Any

from ..errors import MediaError
from ..model_files.model_args import MediaSettings

# Decoding a frame costs about 20-70 µs however small it is (measured for H.264 from 64x48 to
# 640x360 on a 2-core CPU), as much as some 16 thousand pixels of a large frame: without this
# floor a video of millions of tiny frames would count as almost free.
_FLOOR_SIDE = 128
FRAME_COST_FLOOR = _FLOOR_SIDE * _FLOOR_SIDE

_COUNTED = {"image": "images", "video": "videos", "audio": "audio clips"}
_TRIM = "Trim it or send a shorter clip."


class MediaBudget:
    """One request's media limits, and what its files have been charged so far."""

    def __init__(self, settings: MediaSettings | None = None) -> None:
        self.settings = settings or MediaSettings()
        self.image_pixels = 0
        self.video_pixels = 0
        self.audio_seconds = 0.0

    def check_counts(self, media: dict[str, list[Any]]) -> None:
        """Not more files of each kind than a request may hold."""
        for kind, files in media.items():
            limit = getattr(self.settings, f"{kind}_max_count")
            if len(files) > limit:
                raise MediaError(
                    f"This request holds {len(files)} {_COUNTED[kind]}; this server reads at most {limit} per request "
                    f"(the {kind}_max_count setting), those of earlier messages included. Send fewer, or start a new chat."
                )

    def image(self, name: str, declared: tuple[int, int], decoded: tuple[int, int]) -> None:
        """An image ``declared`` width x height in its header, decoded at ``decoded`` (JPEG can
        decode at a fraction of its size)."""
        pixels = decoded[0] * decoded[1]
        if pixels > self.settings.image_max_source_pixels:
            raise self.image_too_large(name, declared)
        self.image_pixels += pixels
        total = self.settings.image_max_total_pixels
        if self.image_pixels > total:
            raise MediaError(
                f"The images of this request come to {_pixels(self.image_pixels)} pixels with the {name}, more than "
                f"the {_pixels(total)} this server decodes per request (the image_max_total_pixels setting), those of earlier "
                "messages included. Send fewer or smaller images, or start a new chat."
            )

    def image_too_large(self, name: str, declared: tuple[int, int] | None = None) -> MediaError:
        """The refusal of an image over image_max_source_pixels, ``declared`` width x height where known."""
        size = f" is {declared[0]}x{declared[1]} pixels, which" if declared else ""
        return MediaError(
            f"The {name}{size} is larger than the {_pixels(self.settings.image_max_source_pixels)} pixels this app decodes "
            "(the image_max_source_pixels setting, a guard against decompression bombs). Downscale it before sending."
        )

    def video(self, name: str, width: int, height: int, seconds: float) -> None:
        """A video's frame size and length, as its header gives them."""
        limit = self.settings.video_max_source_pixels
        if width * height > limit:
            raise MediaError(
                f"The {name} has frames of {width}x{height} pixels, larger than the {_pixels(limit)} pixels "
                "this server decodes per frame (the video_max_source_pixels setting). Downscale it before sending."
            )
        if seconds > self.settings.video_max_seconds:
            raise MediaError(
                f"The {name} is {duration(seconds)} long; the limit is {duration(self.settings.video_max_seconds)} "
                f"(the video_max_seconds setting). {_TRIM}"
            )

    @property
    def most_video_frames(self) -> int:
        """The most frames a request's videos may hold, at the least a frame can cost."""
        return self.settings.video_max_total_pixels // FRAME_COST_FLOOR

    def video_frames(self, name: str, frames: int) -> None:
        """A video's frame count, before its packets are read: each costs something even to index."""
        if frames > self.most_video_frames:
            raise MediaError(
                f"The {name} holds more than {self.most_video_frames:,} frames, more than this server reads per request "
                f"(the video_max_total_pixels setting counts each frame as at least {_FLOOR_SIDE}x{_FLOOR_SIDE} pixels). "
                "Trim it or lower its frame rate."
            )

    def video_decoding(self, name: str, frames: int, width: int, height: int) -> None:
        """The frames a video's reader decodes to reach its sampled frames, each of width x height."""
        self.video_pixels += frames * max(width * height, FRAME_COST_FLOOR)
        total = self.settings.video_max_total_pixels
        if self.video_pixels > total:
            raise MediaError(
                f"Sampling the {name} means decoding {frames:,} frames of {width}x{height} (every frame from a keyframe to each "
                f"sampled one), which takes this request over the {_pixels(total)} pixels of video this server decodes per "
                "request (the video_max_total_pixels setting). Trim it, lower its resolution or frame rate, or "
                "re-encode it with a keyframe every second or two."
            )

    def audio(self, name: str, channels: int, rate: float, seconds: float, max_seconds: float, why: str) -> None:
        """An audio clip's channels, sample rate and length, as its header gives them; ``max_seconds``
        is the longest clip the model takes, ``why`` where that limit comes from."""
        if channels > self.settings.audio_max_channels:
            raise MediaError(
                f"The {name} has {channels} channels; this server reads at most {self.settings.audio_max_channels} "
                "(the audio_max_channels setting). Mix it down to mono or stereo before sending."
            )
        if rate > self.settings.audio_max_sample_rate:
            raise MediaError(
                f"The {name} has {rate:,.0f} samples per second; this server reads at most "
                f"{self.settings.audio_max_sample_rate:,} (the audio_max_sample_rate setting). Resample it to 48 kHz or less before sending."
            )
        if seconds > max_seconds:
            raise MediaError(f"The {name} is {duration(seconds)} long; the limit is {duration(max_seconds)} ({why}). {_TRIM}")
        self.audio_seconds += seconds
        total = self.settings.audio_max_total_seconds
        if self.audio_seconds > total:
            raise MediaError(
                f"The audio of this request comes to {duration(self.audio_seconds)} with the {name}, more than the "
                f"{duration(total)} this server reads per request (the audio_max_total_seconds setting), that of earlier messages "
                "included. Send shorter clips, or start a new chat."
            )


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _pixels(count: int) -> str:
    return f"{round(count / 1e6):,} million" if count >= 1e6 else f"{count:,}"
