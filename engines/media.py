"""Media inputs accepted by chat/stream_chat, as the seed contract lists them."""

from __future__ import annotations

import os
from typing import Any, Union

# A path, raw bytes, or a PIL.Image.Image.
ImageInput = Union[str, os.PathLike, bytes, Any]
# A path, raw bytes, or a list of frames (PIL images).
VideoInput = Union[str, os.PathLike, bytes, list, Any]
# A path, raw bytes, or (numpy array, sample rate).
AudioInput = Union[str, os.PathLike, bytes, tuple, Any]

PLACEHOLDERS = {"image": "<image>", "video": "<video>", "audio": "<audio>"}
