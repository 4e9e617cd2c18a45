"""FAKE SGLang runtime, for testing our SGLang and KTransformers engines on machines without a GPU.

This is not SGLang and generates no model's words. It reproduces the side of SGLang 0.5.x (and of
its sglang-kt fork) that our engine relies on, as read from their sources:

- importing ``sglang`` installs uvloop's event loop policy process-wide, and ``Engine(...)``
  switches multiprocessing to spawn;
- ``Engine(**server_args)`` refuses keywords that are not ServerArgs fields (TypeError);
- ``await engine.async_generate(prompt | input_ids, sampling_params, image_data=..., stream=True,
  rid=..., lora_path=name)`` (a name from the ``lora_paths`` it started with) returns an async iterator of chunks ``{"text", "output_ids", "meta_info"}``; text is
  the whole reply so far, or only the new text when incremental streaming output is on;
  ``meta_info["finish_reason"]`` is None until the last chunk, then ``{"type": "stop", "matched":
  token id or stop string}``, ``{"type": "length", "length": n}`` or ``{"type": "abort", ...}``;
  ``prompt_tokens`` and ``completion_tokens`` (which counts the end token);
- a stop string is cut off only once it is complete, so running text can show part of one;
- bad sampling values raise ValueError with SGLang's wording when the stream is first read;
- ``json_schema`` must be JSON text, as SGLang's grammar backends read it; the fake's reply does
  not follow it (schemas are tested on the backends that run here: llama.cpp, transformers, vLLM);
- ``engine.tokenizer_manager.abort_request(rid)`` ends that request with an abort chunk, and
  ``rid_to_state`` holds the unfinished requests; a stream closed or cancelled before its end
  releases its request (SGLang's generate_request aborts it on the way out);
  ``shutdown()`` ends the engine.

Replies are written with the served model's real tokenizer and are a function of the prompt:
greedy requests (temperature 0, which SGLang turns into top_k=1) always get the same words for
the same prompt; sampled ones depend on ``sampling_seed``. A prompt that asks for something
"long" gets a reply longer than any test's limit; others get 20 to 40 words and the end token.

The name sets below are what this fake accepts; tests/test_runtime_interfaces.py checks that each
is part of the real package's, so the fake cannot accept what SGLang would refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import importlib.abc
import importlib.util
import multiprocessing
import random
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import uvloop
from transformers import AutoTokenizer

SECONDS_PER_TOKEN = 0.001

SAMPLING_PARAMS = frozenset({
    "max_new_tokens", "stop", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "skip_special_tokens", "sampling_seed", "json_schema",
})
ASYNC_GENERATE_PARAMS = frozenset({
    "prompt", "sampling_params", "input_ids", "image_data", "audio_data", "video_data", "stream", "rid", "lora_path",
})
SERVER_ARGS = frozenset({
    "model_path", "tokenizer_path", "dtype", "trust_remote_code", "max_running_requests", "log_level",
    "mem_fraction_static", "context_length", "enable_deterministic_inference", "tp_size", "disable_cuda_graph",
    "enable_lora", "lora_paths",
})
KT_SERVER_ARGS = frozenset({
    "kt_weight_path", "kt_method", "kt_cpuinfer", "kt_threadpool_count", "kt_numa_nodes", "kt_num_gpu_experts",
    "kt_gpu_prefill_token_threshold", "kt_enable_dynamic_expert_update",
})

_WORDS = (
    "red green blue yellow purple orange colors bright light sky sea grass sun leaf stone river "
    "dragon castle knight story chapter night fire mountain village dawn wind quiet bold old"
).split()


class _SamplingParams:
    """SGLang's SamplingParams: the same names, defaults, greedy rewrite and range checks."""

    def __init__(self, max_new_tokens=128, stop=None, temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0,
                 frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0,
                 skip_special_tokens=True, sampling_seed=None, json_schema=None) -> None:
        self.max_new_tokens = max_new_tokens
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.temperature, self.top_p, self.top_k, self.min_p = temperature, top_p, top_k, min_p
        self.frequency_penalty, self.presence_penalty = frequency_penalty, presence_penalty
        self.repetition_penalty = repetition_penalty
        self.skip_special_tokens = skip_special_tokens
        self.sampling_seed = sampling_seed
        self.json_schema = json_schema
        if 0 <= self.temperature < 1e-6:
            self.temperature, self.top_k = 1.0, 1

    def verify(self) -> None:
        if self.json_schema is not None:
            json.loads(self.json_schema)
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be a non-negative finite number, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < 1 and self.top_k != -1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}.")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}.")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(
                f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {self.repetition_penalty}."
            )


class TokenizerManager:
    def __init__(self) -> None:
        self.rid_to_state: dict[str, dict[str, Any]] = {}
        # Rids given to abort_request while their request was running, and rids whose stream was
        # closed or cancelled before the end.
        self.aborted: list[str] = []
        self.released: list[str] = []

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        state = self.rid_to_state.get(rid)
        if state is not None and not state["abort_sent"]:
            state["abort_sent"] = True
            self.aborted.append(rid)


class Engine:
    """What ``sglang.Engine`` looks like from outside."""

    server_arg_names = SERVER_ARGS | {"incremental_streaming_output"}
    incremental_arg = "incremental_streaming_output"

    def __init__(self, **server_args: Any) -> None:
        unknown = sorted(set(server_args) - self.server_arg_names)
        if unknown:
            raise TypeError(f"Unexpected keyword argument {unknown[0]!r}")
        if "model_path" not in server_args:
            raise TypeError("Missing required argument 'model_path'")
        multiprocessing.set_start_method("spawn", force=True)
        self.server_args = server_args
        self.tokenizer = AutoTokenizer.from_pretrained(server_args.get("tokenizer_path") or server_args["model_path"])
        self.tokenizer_manager = TokenizerManager()
        self.calls: list[dict[str, Any]] = []
        self.generated: dict[str, int] = {}
        self.shut_down = False

    async def async_generate(self, **kwargs: Any):
        unknown = sorted(set(kwargs) - ASYNC_GENERATE_PARAMS)
        if unknown:
            raise TypeError(f"async_generate() got an unexpected keyword argument {unknown[0]!r}")
        call = {name: kwargs.get(name) for name in ASYNC_GENERATE_PARAMS}
        self.calls.append({**call, "passed": set(kwargs)})
        loaded_adapters = {path.split("=", 1)[0] for path in self.server_args.get("lora_paths") or ()}
        if call["lora_path"] is not None and call["lora_path"] not in loaded_adapters:
            raise ValueError(f"LoRA adapter {call['lora_path']!r} is not loaded.")
        rid = call["rid"] or uuid.uuid4().hex
        chunks = self._generate(call["prompt"], call["input_ids"], call["sampling_params"] or {}, rid, call["stream"])
        if call["stream"]:
            return chunks
        async with contextlib.aclosing(chunks):
            return await chunks.__anext__()

    def shutdown(self) -> None:
        self.shut_down = True

    async def _generate(self, prompt, input_ids, sampling_params, rid, stream) -> AsyncIterator[dict[str, Any]]:
        unknown = sorted(set(sampling_params) - SAMPLING_PARAMS)
        if unknown:
            raise TypeError(f"Unexpected keyword argument {unknown[0]!r}")
        params = _SamplingParams(**sampling_params)
        params.verify()
        prompt_ids = list(input_ids) if input_ids is not None else self.tokenizer.encode(prompt)
        script = self._script(prompt_ids, params)
        incremental = bool(self.server_args.get(self.incremental_arg))
        state = self.tokenizer_manager.rid_to_state[rid] = {"abort_sent": False}
        output: list[int] = []
        sent = ""
        try:
            while True:
                await asyncio.sleep(SECONDS_PER_TOKEN)
                if state["abort_sent"]:
                    yield self._chunk(rid, prompt_ids, output, "" if incremental else sent,
                                      {"type": "abort", "message": "Abort request.", "status_code": None})
                    return
                output.append(script[len(output)])
                text = self.tokenizer.decode(output, skip_special_tokens=params.skip_special_tokens)
                finish = None
                if output[-1] == self.tokenizer.eos_token_id:
                    finish = {"type": "stop", "matched": output[-1]}
                    text = self.tokenizer.decode(output[:-1], skip_special_tokens=params.skip_special_tokens)
                elif hits := [(text.find(s), s) for s in params.stop if s in text]:
                    at, matched = min(hits)
                    finish = {"type": "stop", "matched": matched}
                    text = text[:at]
                elif len(output) == params.max_new_tokens:
                    finish = {"type": "length", "length": params.max_new_tokens}
                if stream or finish:
                    yield self._chunk(rid, prompt_ids, output, text[len(sent):] if incremental else text, finish)
                sent = text
                if finish:
                    return
        except BaseException:
            if not state["abort_sent"]:
                self.tokenizer_manager.released.append(rid)
            raise
        finally:
            self.tokenizer_manager.rid_to_state.pop(rid, None)
            self.generated[rid] = len(output)

    def _script(self, prompt_ids: list[int], params: _SamplingParams) -> list[int]:
        if params.top_k == 1:
            rng = random.Random(hashlib.sha256(str(prompt_ids).encode()).hexdigest())
        else:
            rng = random.Random(params.sampling_seed)
        long = "long" in self.tokenizer.decode(prompt_ids)
        words = [rng.choice(_WORDS) for _ in range(3000 if long else rng.randrange(20, 41))]
        return self.tokenizer.encode(" ".join(words).capitalize() + ".", add_special_tokens=False) + [self.tokenizer.eos_token_id]

    @staticmethod
    def _chunk(rid, prompt_ids, output, text, finish) -> dict[str, Any]:
        return {
            "text": text,
            "output_ids": list(output),
            "meta_info": {
                "id": rid,
                "finish_reason": finish,
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(output),
                "cached_tokens": 0,
            },
        }


class KTEngine(Engine):
    """sglang-kt 0.7.x, KTransformers' fork: kt_* arguments, and the older name of incremental output."""

    server_arg_names = SERVER_ARGS | KT_SERVER_ARGS | {"stream_output"}
    incremental_arg = "stream_output"


KT_METHODS = frozenset({"AMXINT4", "AMXINT8", "RAWINT4", "FP8", "BF16", "GPTQ_INT4", "LLAMAFILE"})


def kt_kernel_module(variant: str, kernels: tuple[str, ...]) -> Callable[[ModuleType], None]:
    """A FAKE kt-kernel: the CPU build it loaded, the methods it knows, the kernels that build has."""
    def build(module: ModuleType) -> None:
        module.__version__ = "0.7.2 (fake)"
        module.__cpu_variant__ = variant
        module.experts = SimpleNamespace(INFERENCE_METHODS=KT_METHODS)
        module.kt_kernel_ext = SimpleNamespace(moe=SimpleNamespace(**{name: object() for name in kernels}))
    return build


def ktransformers_module(module: ModuleType) -> None:
    module.__version__ = "0.7.2 (fake)"


def _sglang_module(module: ModuleType, engine_type: type[Engine]) -> None:
    # What importing sglang.srt.entrypoints.engine does to the whole process.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    module.installed_policy = asyncio.get_event_loop_policy()
    module.Engine = engine_type
    module.__version__ = "0.5.23 (fake)"


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, builders: dict[str, Callable[[ModuleType], None]]) -> None:
        self._builders = builders

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self._builders else None

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        self._builders[module.__name__](module)


@contextlib.contextmanager
def installed(engine_type: type[Engine] = Engine, extra: dict[str, Callable[[ModuleType], None]] | None = None) -> Iterator[None]:
    """Make ``import sglang`` (and the ``extra`` module names) load the fakes until exit, then
    put back the event loop policy and start method the process had."""
    builders = {"sglang": lambda module: _sglang_module(module, engine_type), **(extra or {})}
    finder = _Finder(builders)
    policy = asyncio.get_event_loop_policy()
    start_method = multiprocessing.get_start_method(allow_none=True)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in builders:
            sys.modules.pop(name, None)
        asyncio.set_event_loop_policy(policy)
        multiprocessing.set_start_method(start_method, force=True)
