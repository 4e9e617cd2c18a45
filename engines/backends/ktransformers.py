"""The KTransformers backend: SGLang's engine with KTransformers' CPU experts.

KTransformers 0.7 serves through ``sglang-kt`` (its fork of SGLang, installed as ``sglang``),
with ``kt-kernel`` running the MoE experts of large sparse models (DeepSeek-V3 and the like) on
the CPU while the rest runs on the GPU. This engine starts that fork the way KTransformers' own
``kt run`` does, with the same kt_* settings and defaults; ``engine_args`` override them.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
from typing import Any

from ..errors import BackendUnavailableError, ConfigError
from ..model_files import Progress
from .sglang import SGLangEngine, require_gpu

# What `kt run` passes when nothing else is set (kt_kernel/cli/commands/run.py, ktransformers 0.7.2).
KT_RUN_DEFAULTS = {
    "kt_method": "AMXINT4",
    "kt_num_gpu_experts": 1,
    "kt_gpu_prefill_token_threshold": 4096,
    "kt_enable_dynamic_expert_update": True,
}
# kt-kernel kernels that exist only in some of its CPU builds.
_METHOD_KERNELS = {"AMXINT4": "AMXInt4_MOE", "AMXINT8": "AMXInt8_MOE"}


class KTransformersEngine(SGLangEngine):
    name = "ktransformers"
    incremental_output_arg = "stream_output"

    def check_machine(self, report: Progress) -> None:
        self.cpu_kernels = describe_cpu_kernels()
        report(0.05, f"{self.cpu_kernels}.")
        require_gpu(self.name, found=f"({self.cpu_kernels}.) ")
        require_sglang_kt()
        check_kt_method(self.kt_method)

    @property
    def kt_method(self) -> str:
        return str(self.model_args.engine_args.get("kt_method", KT_RUN_DEFAULTS["kt_method"])).upper()

    def server_args(self, path: str) -> dict[str, Any]:
        cpu_threads = os.cpu_count() or 1
        return {
            **KT_RUN_DEFAULTS,
            # Quantized expert weights are a separate directory; without one, kt run reads the model's own.
            "kt_weight_path": path,
            "kt_cpuinfer": max(1, int(cpu_threads * 0.8)),
            "kt_threadpool_count": numa_node_count(),
            **super().server_args(path),
            "kt_method": self.kt_method,
        }


def _kt_kernel() -> Any:
    """kt-kernel, which picks one build for this CPU when imported (AMX, one of several AVX-512
    levels, or AVX2)."""
    try:
        import kt_kernel
    except (ImportError, RuntimeError) as error:
        raise BackendUnavailableError(
            f"kt-kernel cannot be loaded on this machine: {error}. Install it with pip install kt-kernel."
        ) from error
    return kt_kernel


def describe_cpu_kernels() -> str:
    kt_kernel = _kt_kernel()
    return f"kt-kernel {kt_kernel.__version__} runs its {kt_kernel.__cpu_variant__} CPU kernels on this machine"


def check_kt_method(method: str) -> None:
    """A clear error for a kt_method kt-kernel does not know, or has no kernels for on this CPU
    (the AMX methods are missing from its AVX2 build)."""
    kt_kernel = _kt_kernel()
    methods = kt_kernel.experts.INFERENCE_METHODS
    if method not in methods:
        raise ConfigError(f"Unknown kt_method {method!r}; kt-kernel supports: {', '.join(sorted(methods))}.")
    kernel = _METHOD_KERNELS.get(method)
    if kernel and not hasattr(kt_kernel.kt_kernel_ext.moe, kernel):
        raise BackendUnavailableError(
            f"kt_method {method} needs AMX or AVX-512 CPU kernels, but {describe_cpu_kernels()}. Choose a "
            "kt_method this CPU runs (BF16, FP8, RAWINT4, GPTQ_INT4, LLAMAFILE...) with weights in that format."
        )


def require_sglang_kt() -> None:
    """Plain SGLang and sglang-kt install the same ``sglang`` package; only the fork knows kt_*."""
    try:
        importlib.metadata.version("sglang-kt")
    except importlib.metadata.PackageNotFoundError:
        raise BackendUnavailableError(
            "The ktransformers backend needs sglang-kt, KTransformers' fork of SGLang, and the sglang installed "
            "here is not it. Install with: pip install 'ktransformers[sglang]' (it replaces plain sglang)."
        ) from None


def numa_node_count() -> int:
    """kt run gives kt-kernel one thread pool per NUMA node."""
    return len(glob.glob("/sys/devices/system/node/node[0-9]*")) or 1
