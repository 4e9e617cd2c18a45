"""A bare reference for multimodal llama.cpp: a GGUF model and its mmproj projector run through
libmtmd with nothing but llama-cpp-python's low-level bindings (llama_cpp, llama_cpp.mtmd_cpp), no
anychat code, the way llama.cpp's own mtmd-cli does it: tokenize a prompt whose media markers
(``<__media__>``) stand for the given images or audio, evaluate the chunks with
mtmd_helper_eval_chunks, then sample greedily. Tests compare the engine against it.

    python harness/bare_mtmd.py MODEL.gguf MMPROJ.gguf "<__media__>What is this?" picture.png [-n 8]
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd

from engines.llamacpp_build import cpu_has_amx

CHUNK_KINDS = {mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT: "text", mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image", mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio"}


def default_marker() -> str:
    return mtmd.mtmd_default_marker().decode()


# libmtmd's (and clip's) log: kept, so that a refused projector says why; WARN and ERROR also go to stderr when verbose.
_LOG: list[tuple[int, str]] = []
_VERBOSE = False


@llama_cpp.llama_log_callback
def _mtmd_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    message = text.decode("utf-8", "replace")
    if level == 5 and _LOG:  # GGML_LOG_LEVEL_CONT
        level = _LOG[-1][0]
    _LOG.append((level, message))
    del _LOG[:-200]
    if _VERBOSE and level >= 3:
        print(message, end="", file=sys.stderr)


mtmd.mtmd_helper_log_set(_mtmd_log, ctypes.c_void_p(0))


def mtmd_errors() -> list[str]:
    """libmtmd's ERROR lines (level 4) logged so far."""
    return [text.strip() for level, text in _LOG if level == 4 and text.strip()]


@dataclass
class Chunk:
    kind: str  # text, image or audio
    n_tokens: int  # KV cells it takes
    n_pos: int  # positions it advances (fewer than n_tokens for M-RoPE images)
    tokens: list[int] | None = None  # a text chunk's token ids


@dataclass
class Result:
    chunks: list[Chunk]
    n_past: int  # position after the prompt
    tokens: list[int] = field(default_factory=list)  # greedy reply, EOG excluded
    text: str = ""
    stopped_at_eog: bool = False


class BareMtmd:
    """A model, one llama context and its libmtmd context. Raises RuntimeError (with libmtmd's own
    message) when mtmd_init_from_file refuses the pair."""

    def __init__(self, model_path: str | Path, mmproj_path: str | Path, n_ctx: int = 2048, n_batch: int = 512,
                 n_threads: int | None = None, use_extra_bufts: bool | None = None, warmup: bool = False,
                 image_min_tokens: int = -1, image_max_tokens: int = -1, verbose: bool = False):
        global _VERBOSE
        _VERBOSE = verbose
        # llama.cpp's own log goes through llama_cpp's logger: quiet below ERROR, as Llama(verbose=False) sets it.
        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
        self.n_batch = n_batch
        n_threads = n_threads or max(1, (os.cpu_count() or 2))
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0
        model_params.use_extra_bufts = not cpu_has_amx() if use_extra_bufts is None else use_extra_bufts
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = n_ctx
        context_params.n_batch = context_params.n_ubatch = n_batch
        context_params.n_threads = context_params.n_threads_batch = n_threads
        # Flash attention off, as llama-cpp-python's Llama() has it by default (and so our engine):
        # llama.cpp's own default (auto) sums attention in another order, which parts greedy
        # replies at near-ties.
        context_params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = llama_cpp.llama_init_from_model(self.model, context_params)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama.cpp could not create a context")
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = warmup
        params.image_min_tokens = image_min_tokens
        params.image_max_tokens = image_max_tokens
        params.media_marker = mtmd.mtmd_default_marker()
        errors_before = len(mtmd_errors())
        self.mctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), self.model, params)
        if not self.mctx:
            why = " ".join(mtmd_errors()[errors_before:]) or "no message"
            self.close()
            raise RuntimeError(f"libmtmd refused {mmproj_path} with {model_path}: {why}")
        self.vision = bool(mtmd.mtmd_support_vision(self.mctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.mctx))
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(self.mctx))
        self.audio_sample_rate = mtmd.mtmd_get_audio_sample_rate(self.mctx) if self.audio else None
        self.n_embd = llama_cpp.llama_model_n_embd(self.model)

    def close(self) -> None:
        if getattr(self, "mctx", None):
            mtmd.mtmd_free(self.mctx)
            self.mctx = None
        if getattr(self, "ctx", None):
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> BareMtmd:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def bitmap(self, media: str | Path | bytes):
        """A bitmap from an image or audio file (path) or its bytes (png/jpg/..., wav/mp3/flac)."""
        errors_before = len(mtmd_errors())
        if isinstance(media, (bytes, bytearray)):
            buffer = (ctypes.c_uint8 * len(media)).from_buffer_copy(media)
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.mctx, buffer, len(media), False)
        else:
            bitmap = mtmd.mtmd_helper_bitmap_init_from_file(self.mctx, str(media).encode(), False)
        if not bitmap:
            what = f"{len(media)} bytes" if isinstance(media, (bytes, bytearray)) else media
            raise ValueError(f"libmtmd could not read {what}: {' '.join(mtmd_errors()[errors_before:]) or 'no message'}")
        return bitmap

    def tokenize(self, prompt: str, media: list[str | Path | bytes] = (), add_special: bool = True):
        """mtmd_tokenize: the chunks (caller frees with mtmd_input_chunks_free) and their description."""
        bitmaps = []
        try:
            bitmaps.extend(self.bitmap(item) for item in media)
            text = mtmd.mtmd_input_text()
            encoded = prompt.encode()
            text.text, text.text_len, text.add_special, text.parse_special = encoded, len(encoded), add_special, True
            chunks = mtmd.mtmd_input_chunks_init()
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            errors_before = len(mtmd_errors())
            status = mtmd.mtmd_tokenize(self.mctx, chunks, ctypes.byref(text), array, len(bitmaps))
            if status != 0:  # 2 for every error of mtmd_tokenize (marker count, a medium the projector lacks, ...)
                mtmd.mtmd_input_chunks_free(chunks)
                raise ValueError(f"mtmd_tokenize returned {status}: {' '.join(mtmd_errors()[errors_before:]) or 'no message'}")
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
        described = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = CHUNK_KINDS[mtmd.mtmd_input_chunk_get_type(chunk)]
            tokens = None
            if kind == "text":
                n = ctypes.c_size_t(0)
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens = [pointer[j] for j in range(n.value)]
            described.append(Chunk(kind, mtmd.mtmd_input_chunk_get_n_tokens(chunk), mtmd.mtmd_input_chunk_get_n_pos(chunk), tokens))
        return chunks, described

    def describe(self, prompt: str, media: list[str | Path | bytes] = ()) -> list[Chunk]:
        chunks, described = self.tokenize(prompt, media)
        mtmd.mtmd_input_chunks_free(chunks)
        return described

    def generate(self, prompt: str, media: list[str | Path | bytes] = (), n_predict: int = 8) -> Result:
        """From an empty KV cache: evaluate the prompt with its media, then ``n_predict`` greedy tokens
        (fewer if an end-of-generation token comes; it is not included)."""
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        chunks, described = self.tokenize(prompt, media)
        n_past = llama_cpp.llama_pos(0)
        try:
            status = mtmd.mtmd_helper_eval_chunks(self.mctx, self.ctx, chunks, 0, 0, self.n_batch, True, ctypes.byref(n_past))
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
        if status != 0:
            raise RuntimeError(f"mtmd_helper_eval_chunks returned {status}")
        result = Result(described, n_past.value)
        sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        position = n_past.value
        try:
            for _ in range(n_predict):
                token = llama_cpp.llama_sampler_sample(sampler, self.ctx, -1)
                if llama_cpp.llama_vocab_is_eog(self.vocab, token):
                    result.stopped_at_eog = True
                    break
                result.tokens.append(token)
                batch.n_tokens = 1
                batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = token, position, 1, 0, True
                if llama_cpp.llama_decode(self.ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                position += 1
        finally:
            llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_sampler_free(sampler)
        result.text = self.detokenize(result.tokens)
        return result

    def detokenize(self, tokens: list[int]) -> str:
        pieces = b""
        buffer = ctypes.create_string_buffer(256)
        for token in tokens:
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, True)
            pieces += buffer.raw[: max(n, 0)]
        return pieces.decode("utf-8", "replace")


def check_pair(model_path: str | Path, mmproj_path: str | Path) -> str | None:
    """None when libmtmd accepts the pair, else its reason."""
    try:
        with BareMtmd(model_path, mmproj_path, n_ctx=256):
            return None
    except RuntimeError as error:
        return str(error)


def run(model_path: str | Path, mmproj_path: str | Path, prompt: str, media: list[str | Path | bytes] = (), n_predict: int = 8, **options) -> Result:
    """Open the pair, generate once, close."""
    with BareMtmd(model_path, mmproj_path, **options) as bare:
        return bare.generate(prompt, media, n_predict)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("mmproj")
    parser.add_argument("prompt", help=f"text with one {default_marker()} per media file")
    parser.add_argument("media", nargs="*")
    parser.add_argument("-n", "--n-predict", type=int, default=8)
    args = parser.parse_args()
    with BareMtmd(args.model, args.mmproj, verbose=True) as bare:
        print(f"vision={bare.vision} audio={bare.audio} mrope={bare.mrope} n_embd={bare.n_embd}")
        result = bare.generate(args.prompt, args.media, args.n_predict)
    for chunk in result.chunks:
        print(f"{chunk.kind}: {chunk.n_tokens} tokens, {chunk.n_pos} positions" + (f" {chunk.tokens}" if chunk.tokens else ""))
    print(f"n_past={result.n_past} reply={result.tokens} {result.text!r}")


if __name__ == "__main__":
    main()
