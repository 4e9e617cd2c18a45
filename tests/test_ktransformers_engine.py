"""The KTransformers engine against a FAKE sglang-kt runtime (tests/fake_sglang.py) and a fake
kt-kernel, plus our CPU check against the real kt-kernel where its wheel has been downloaded.

KTransformers needs an NVIDIA GPU for everything but its CPU experts, so what is checked here
is our side: the arguments `kt run` would pass, the CPU-kernel check, the messages on a machine
that cannot run it, and the shared engine contract through the SGLang adapter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines import BackendUnavailableError, ChatModel, ConfigError
from engines.backends.ktransformers import numa_node_count
from engines.model_files.paths import resolve_model_path
from tests import fake_sglang, runtime_wheels
from harness.engine_contract import QUESTION, EngineContract

REPO = Path(__file__).resolve().parent.parent
AMX_BUILD = fake_sglang.kt_kernel_module("amx", ("AMXInt4_MOE", "AMXInt8_MOE"))
AVX2_BUILD = fake_sglang.kt_kernel_module("avx2", ())
# kt-kernel 0.7.2's CPU builds, best first, with the /proc/cpuinfo flags each needs (as its
# kt_kernel/_cpu_detect.py reads them, a flag's underscores optional). All but AVX2 have the
# kernels of the AMX methods.
KT_KERNEL_BUILDS = (
    ("amx", ("amx_tile", "amx_int8", "amx_bf16", "avx512f", "avx512bw", "avx512_vnni", "avx512_vbmi", "avx512_bf16")),
    ("avx512_bf16", ("avx512f", "avx512bw", "avx512_vnni", "avx512_vbmi", "avx512_bf16")),
    ("avx512_vbmi", ("avx512f", "avx512bw", "avx512_vnni", "avx512_vbmi")),
    ("avx512_vnni", ("avx512f", "avx512bw", "avx512_vnni")),
    ("avx512_base", ("avx512f", "avx512bw")),
    ("avx2", ()),
)


def start(settings: dict, kt_kernel=AMX_BUILD, gpu: bool = True, fork: bool = True, progress=None) -> ChatModel:
    """A ChatModel on the fakes. A GPU and the sglang-kt distribution are pretended while it starts,
    unless a test asks for their absence."""
    fakes = {"kt_kernel": kt_kernel, "ktransformers": fake_sglang.ktransformers_module}
    with fake_sglang.installed(fake_sglang.KTEngine, fakes), pytest.MonkeyPatch.context() as patch:
        if gpu:
            patch.setattr(torch.cuda, "is_available", lambda: True)
        if fork:
            patch.setattr("engines.backends.ktransformers.require_sglang_kt", lambda: None)
        return ChatModel({"infer_backend": "ktransformers", **settings}, progress)


@pytest.fixture(scope="module")
def kt_model():
    with start({}) as model:
        yield model


class TestKTransformersContract(EngineContract):
    writes_model_text = False  # the FAKE runtime writes words from the prompt, no model's

    @pytest.fixture
    def model(self, kt_model):
        return kt_model


def test_starts_sglang_kt_with_what_kt_run_passes(kt_model):
    server_args = kt_model.engine.model.server_args
    path = resolve_model_path(None)
    assert server_args["model_path"] == path
    assert {key: value for key, value in server_args.items() if key.startswith("kt_")} == {
        "kt_weight_path": path,
        "kt_method": "AMXINT4",
        "kt_cpuinfer": max(1, int(os.cpu_count() * 0.8)),
        "kt_threadpool_count": numa_node_count(),
        "kt_num_gpu_experts": 1,
        "kt_gpu_prefill_token_threshold": 4096,
        "kt_enable_dynamic_expert_update": True,
    }


def test_engine_args_override_kt_settings(tmp_path):
    settings = {"engine_args": {"kt_weight_path": str(tmp_path), "kt_method": "bf16", "kt_num_gpu_experts": 8}}
    with start(settings) as model:
        server_args = model.engine.model.server_args
    assert (server_args["kt_weight_path"], server_args["kt_method"], server_args["kt_num_gpu_experts"]) == (str(tmp_path), "BF16", 8)


def test_incremental_output_uses_the_forks_name(kt_model):
    settings = {"temperature": 0, "max_new_tokens": 16}
    with start({"engine_args": {"stream_output": True}}) as model:
        assert list(model.stream_chat(QUESTION, **settings)) == list(kt_model.stream_chat(QUESTION, **settings))


def test_progress_tells_which_cpu_kernels_run():
    messages = []
    with start({}, progress=lambda fraction, message: messages.append(message)):
        pass
    assert "kt-kernel 0.7.2 (fake) runs its amx CPU kernels on this machine." in messages


def test_amx_method_on_an_avx2_build_is_refused():
    with pytest.raises(BackendUnavailableError, match="kt_method AMXINT4 needs AMX or AVX-512 CPU kernels.*avx2"):
        start({}, kt_kernel=AVX2_BUILD)
    with start({"engine_args": {"kt_method": "BF16"}}, kt_kernel=AVX2_BUILD) as model:
        assert model.engine.model.server_args["kt_method"] == "BF16"


def test_unknown_kt_method_lists_the_known_ones():
    with pytest.raises(ConfigError, match="Unknown kt_method 'AMXINT3'.*AMXINT4"):
        start({"engine_args": {"kt_method": "amxint3"}})


def test_without_a_gpu_the_message_says_so_and_names_the_cpu_kernels():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(BackendUnavailableError, match=r"needs an NVIDIA GPU.*\(kt-kernel 0.7.2 \(fake\) runs its avx2 CPU kernels"):
        start({}, kt_kernel=AVX2_BUILD, gpu=False)


def test_plain_sglang_is_not_taken_for_the_fork():
    with pytest.raises(BackendUnavailableError, match="needs sglang-kt"):
        start({}, fork=False)


@pytest.fixture(scope="module")
def real_kt_kernel_dir() -> Path:
    """kt-kernel's package out of its pinned wheel (it imports on CPUs; its CUDA parts are not needed)."""
    target = runtime_wheels.WHEELS_DIR / "kt_kernel-unpacked"
    # The metadata last: kt-kernel reads its version from it.
    if not (target / "kt_kernel-0.7.2.dist-info" / "METADATA").is_file():
        with runtime_wheels.wheel("kt_kernel") as archive:
            parts = ("kt_kernel/", "kt_kernel.libs/", "kt_kernel-0.7.2.dist-info/")
            members = [name for name in archive.namelist() if name.startswith(parts)]
            archive.extractall(target, members)
    return target


def test_real_kt_kernel_reports_this_cpus_kernels(real_kt_kernel_dir):
    probe = (
        "import json, kt_kernel\n"
        "from engines.errors import ChatError\n"
        "from engines.backends.ktransformers import check_kt_method, describe_cpu_kernels\n"
        "def outcome(method):\n"
        "    try:\n"
        "        check_kt_method(method)\n"
        "        return 'ok'\n"
        "    except ChatError as error:\n"
        "        return str(error)\n"
        "print(json.dumps({'variant': kt_kernel.__cpu_variant__, 'found': describe_cpu_kernels(),\n"
        "                  'AMXINT4': outcome('AMXINT4'), 'BF16': outcome('BF16'), 'NOPE': outcome('NOPE')}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(real_kt_kernel_dir), str(REPO)])}
    env.pop("KT_KERNEL_CPU_VARIANT", None)  # kt-kernel's override of the build it picks
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    expected = cpu_build(flags)
    assert report["variant"] == expected, f"kt-kernel runs its {report['variant']} build where this CPU's flags call for {expected}"
    assert report["found"] == f"kt-kernel 0.7.2 runs its {expected} CPU kernels on this machine"
    assert report["BF16"] == "ok"
    assert report["NOPE"].startswith("Unknown kt_method 'NOPE'; kt-kernel supports:") and "LLAMAFILE" in report["NOPE"]
    if expected == "avx2":
        assert report["AMXINT4"].startswith("kt_method AMXINT4 needs AMX or AVX-512 CPU kernels")
    else:
        assert report["AMXINT4"] == "ok"


def cpu_build(flags: list[str]) -> str:
    """The kt-kernel build made for a CPU with ``flags``."""
    have = {flag.replace("_", "") for flag in flags}
    return next(build for build, needs in KT_KERNEL_BUILDS if all(flag.replace("_", "") in have for flag in needs))
