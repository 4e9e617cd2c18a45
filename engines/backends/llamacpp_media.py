"""Images, video frames and audio on the llama.cpp backend, through libmtmd and the model's projector.

libmtmd turns a prompt's text, in which a marker stands for each file, and the files themselves
into chunks: runs of text tokens, and image or audio chunks that it encodes with the projector
and evaluates into a sequence of the context (mtmd_helper_eval_chunk_single). It also puts the
model's own begin/end tokens around each file, and computes each file's tokens and positions.
The engine's batcher evaluates text chunks with the rest of its batch and media chunks one by
one; each media chunk carries a key made from its file's content, so that a conversation's next
turn finds the file in the sequence's cache and does not encode it again.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MediaError, ModelLoadError
from ..model_files.projector import Projector
from ..prompt.builder import Prompt
from ..prompt.media_markers import MarkerMedia

try:
    import llama_cpp.mtmd_cpp as mtmd
except (ImportError, OSError) as error:  # llama-cpp-python built without libmtmd (LLAVA_BUILD=OFF)
    mtmd = None
    MTMD_MISSING = str(error)


@dataclass(eq=False)
class MediaChunk:
    """One image or audio chunk of a prompt: its KV cells, the positions it advances (fewer than
    its cells on M-RoPE models), and what identifies its content in a sequence's cache."""

    key: tuple
    n_tokens: int
    n_pos: int
    pointer: Any


@dataclass(eq=False)
class PromptChunks:
    """A prompt as libmtmd split it: text token ids and MediaChunks, in order; ``free`` lets go
    of libmtmd's chunks once the prompt is evaluated."""

    items: list[int | MediaChunk]
    length: int
    free: Callable[[], None] = field(default=lambda: None)


class MediaEncoder:
    """libmtmd's context for a model and its projector."""

    def __init__(self, model: Any, projector: Projector, threads: int, on_gpu: bool, errors: Any) -> None:
        """``errors``: the ErrorLines llama.cpp's log goes to, for the reasons of a refusal."""
        if mtmd is None:
            raise ModelLoadError(
                f"{projector.path.name} needs libmtmd, which this llama-cpp-python was built without ({MTMD_MISSING}). "
                "Run bash scripts/setup.sh again: it rebuilds llama-cpp-python with it."
            )
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = on_gpu
        params.n_threads = threads
        params.print_timings = False
        params.warmup = False
        logged = errors.count
        self._ctx = mtmd.mtmd_init_from_file(str(projector.path).encode(), model.model, params)
        if not self._ctx:
            why = errors.since(logged) or "libmtmd gave no reason"
            raise ModelLoadError(f"llama.cpp could not open the projector {projector.path.name} with this model: {why}")
        self.projector = projector
        self.marker = mtmd.mtmd_default_marker().decode()
        self.kinds = frozenset(
            [*(("image", "video") if mtmd.mtmd_support_vision(self._ctx) else ()), *(("audio",) if mtmd.mtmd_support_audio(self._ctx) else ())]
        )
        self.sampling_rate = mtmd.mtmd_get_audio_sample_rate(self._ctx) if "audio" in self.kinds else None
        self._errors = errors

    @property
    def pointer(self) -> Any:
        return self._ctx

    def prompt_media(self, model_args: Any, tokenizer: Any) -> MarkerMedia:
        """What the prompt path needs to place and read this projector's media."""
        return MarkerMedia(self.marker, self.kinds, model_args, self.sampling_rate, tokenizer)

    def chunks(self, prompt: Prompt) -> PromptChunks:
        """The prompt's text and media as libmtmd's chunks. Slow (decodes nothing, but hashes the
        media): call it off the event loop."""
        text, bitmaps = self._bitmaps(prompt)
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            encoded = text.encode()
            given = mtmd.mtmd_input_text()
            given.text, given.text_len, given.add_special, given.parse_special = encoded, len(encoded), False, True
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*[bitmap for bitmap, _ in bitmaps])
            logged = self._errors.count
            if mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(given), array, len(bitmaps)) != 0:
                why = self._errors.since(logged) or "libmtmd gave no reason"
                raise MediaError(f"llama.cpp could not read these media with {self.projector.path.name}: {why}")
            items, length, seen = [], 0, {}
            for index in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, index)
                n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                length += n_tokens
                if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    count = ctypes.c_size_t(0)
                    tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                    items += tokens[: count.value]
                else:
                    content = (mtmd.mtmd_input_chunk_get_id(chunk) or b"").decode()
                    # A file split into several chunks (an image in tiles) has one id for all of them.
                    seen[content] = seen.get(content, -1) + 1
                    items.append(MediaChunk((content, seen[content], n_tokens), n_tokens, mtmd.mtmd_input_chunk_get_n_pos(chunk), chunk))
        except BaseException:
            mtmd.mtmd_input_chunks_free(chunks)
            raise
        finally:
            for bitmap, _ in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
        return PromptChunks(items, length, lambda: mtmd.mtmd_input_chunks_free(chunks))

    def _bitmaps(self, prompt: Prompt) -> tuple[str, list[tuple[Any, str]]]:
        """A bitmap for each image, frame and clip in the order of the prompt's markers, and the
        prompt's text with each video's marker repeated for its frames."""
        files = {kind: iter(loaded) for kind, loaded in prompt.media.items()}
        pieces = prompt.text.split(self.marker)
        text, bitmaps = pieces[0], []
        try:
            for kind, after in zip(MarkerMedia.order(prompt.request.messages), pieces[1:]):
                item = next(files[kind])
                if kind == "image":
                    made = [_image_bitmap(np.asarray(item.convert("RGB")))]
                elif kind == "video":
                    made = [_image_bitmap(frame) for frame in item.frames]
                else:
                    made = [_audio_bitmap(np.asarray(item, dtype=np.float32))]
                bitmaps += made
                text += self.marker * len(made) + after
        except BaseException:
            for bitmap, _ in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
            raise
        return text, bitmaps

    def evaluate(self, context: Any, chunk: MediaChunk, position: int, seq_id: int, batch: int) -> int | None:
        """Encode ``chunk`` and put it into sequence ``seq_id`` from ``position``: the position
        after it, or None where llama.cpp stopped (the context's abort callback)."""
        after = ctypes.c_int32(0)
        status = mtmd.mtmd_helper_eval_chunk_single(self._ctx, context, chunk.pointer, position, seq_id, batch, False, ctypes.byref(after))
        return after.value if status == 0 else None

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None


def _image_bitmap(pixels: np.ndarray) -> tuple[Any, str]:
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    height, width = pixels.shape[:2]
    data = pixels.tobytes()
    bitmap = mtmd.mtmd_bitmap_init(width, height, (ctypes.c_uint8 * len(data)).from_buffer_copy(data))
    return _with_id(bitmap, f"image {width}x{height}", data)


def _audio_bitmap(samples: np.ndarray) -> tuple[Any, str]:
    samples = np.ascontiguousarray(samples.reshape(-1), dtype=np.float32)
    data = samples.tobytes()
    bitmap = mtmd.mtmd_bitmap_init_from_audio(len(samples), (ctypes.c_float * len(samples)).from_buffer_copy(data))
    return _with_id(bitmap, f"audio {len(samples)}", data)


def _with_id(bitmap: Any, shape: str, data: bytes) -> tuple[Any, str]:
    """The bitmap named by its content, which its chunks carry (mtmd_input_chunk_get_id)."""
    if not bitmap:
        raise MediaError(f"llama.cpp could not take this {shape.split()[0]}.")
    digest = f"{shape} {hashlib.sha256(data).hexdigest()}"
    mtmd.mtmd_bitmap_set_id(bitmap, digest.encode())
    return bitmap, digest
