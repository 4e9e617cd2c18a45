"""Our SGLang and KTransformers engines against the real packages' interfaces, read from the pinned
wheels' sources (tests/runtime_wheels.py) with ast: nothing is imported or installed, so this runs
without a GPU.

Our engines only ever call the runtime with names the FAKE runtime accepts (their tests run on it,
and it refuses any other name), so checking the fake's names against the real package also
checks ours; the arguments our engines add themselves are checked directly too.
"""

from __future__ import annotations

import ast

import pytest
import torch
from PIL import Image

from engines import ChatModel
from engines.backends.ktransformers import _METHOD_KERNELS, KT_RUN_DEFAULTS, KTransformersEngine
from engines.backends.sglang import SGLangEngine
from harness import tiny_models
from tests import fake_sglang, runtime_wheels



def record_calls(engine_type: type, tmp_path) -> dict[str, set[str]]:
    """Run our engine on the fake runtime through the options it maps, and collect the names it
    passed: ServerArgs fields, async_generate keywords, sampling parameters. (Video and audio
    keywords are covered by the fake's own names, checked below: the engine cannot pass others.)"""
    fake = fake_sglang.KTEngine if engine_type is KTransformersEngine else fake_sglang.Engine
    image = tmp_path / "red.png"
    Image.new("RGB", (16, 16), "red").save(image)
    model_dir = str(tiny_models.build_qwen2_vl(tmp_path / "qwen2-vl"))
    fakes = {"kt_kernel": fake_sglang.kt_kernel_module("amx", ("AMXInt4_MOE",)), "ktransformers": fake_sglang.ktransformers_module}
    with fake_sglang.installed(fake, fakes), pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: True)
        patch.setattr("engines.backends.ktransformers.require_sglang_kt", lambda: None)
        adapter = tmp_path / "tiny-lora"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text("{}")
        settings = {
            "infer_backend": engine_type.name, "model_name_or_path": model_dir, "engine_args": {"enable_deterministic_inference": True},
            # Every serving setting this backend maps to SGLang's own names.
            "max_model_len": 1024, "gpu_memory_utilization": 0.8, "tensor_parallel_size": 1, "enforce_eager": True,
            "lora_adapters": [str(adapter)],
        }
        with ChatModel(settings) as model:
            runtime = model.engine.model
            question = [{"role": "user", "content": "Hello?"}]
            model.chat(question, temperature=0, max_new_tokens=2)
            extras = {name: 0.1 for name in engine_type.generation_settings - {"lora_adapter"}}
            model.chat(question, temperature=0.7, top_k=5, seed=1, stop=["x"], max_new_tokens=2, lora_adapter="tiny-lora", **extras)
            model.chat(question, images=[str(image)], max_new_tokens=2)
            model.chat(question, response_format={"type": "json_object"}, max_new_tokens=2)
    return {
        "server_args": set(runtime.server_args),
        "async_generate": set().union(*(call["passed"] for call in runtime.calls)),
        "sampling_params": set().union(*(call["sampling_params"] for call in runtime.calls)),
    }


SGLANG = {
    "wheel": "sglang",
    "engine": "sglang/srt/entrypoints/engine.py",
    "tokenizer_manager": "sglang/srt/managers/tokenizer_manager.py",
    "sampling_params": "sglang/srt/sampling/sampling_params.py",
    "schedule_batch": "sglang/srt/managers/schedule_batch.py",
}
SGLANG_KT = {**SGLANG, "wheel": "sglang_kt"}


def parse(wheel: str, path: str) -> ast.Module:
    return ast.parse(runtime_wheels.source(wheel, path))


def find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == name)


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs} - {"self"}


def declared_fields(cls: ast.ClassDef) -> set[str]:
    """Annotated fields of a dataclass or msgspec Struct, and the parameters of its __init__."""
    fields = {node.target.id for node in cls.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    init = methods(cls).get("__init__")
    return (fields | (parameters(init) if init else set())) - {name for name in fields if name.startswith("_")}


def self_attributes(scope: ast.AST) -> set[str]:
    """Attributes assigned to self anywhere in ``scope`` (a method, or a whole class)."""
    return {
        target.attr
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


def server_arg_fields(runtime: dict[str, str]) -> set[str]:
    """ServerArgs is a dataclass in server_args.py (sglang-kt); sglang 0.5.23 assembles it from the
    namespace classes (those with _NS_PATH) in srt/arg_groups/fields/."""
    if runtime["wheel"] == "sglang_kt":
        return declared_fields(find_class(parse("sglang_kt", "sglang/srt/server_args.py"), "ServerArgs"))
    with runtime_wheels.wheel("sglang") as archive:
        paths = [name for name in archive.namelist() if name.startswith("sglang/srt/arg_groups/fields/") and name.endswith(".py")]
    fields = set()
    for path in paths:
        for node in ast.walk(parse("sglang", path)):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "_NS_PATH" for t in item.targets) for item in node.body
            ):
                fields |= declared_fields(node)
    return fields


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """record_calls for an engine type, run once per module."""
    records = {}

    def record(engine_type: type) -> dict[str, set[str]]:
        if engine_type not in records:
            records[engine_type] = record_calls(engine_type, tmp_path_factory.mktemp(engine_type.name))
        return records[engine_type]

    return record


RUNTIMES = [
    pytest.param(SGLANG, fake_sglang.Engine, SGLangEngine, id="sglang-0.5.23"),
    pytest.param(SGLANG_KT, fake_sglang.KTEngine, KTransformersEngine, id="sglang-kt-0.7.2"),
]


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_server_args_exist(runtime, fake, engine, recorded):
    fields = server_arg_fields(runtime)
    assert len(fields) > 100, "ServerArgs was not found where expected"
    ours = recorded(engine)["server_args"] | {engine.incremental_output_arg}
    assert not ours - fields, f"our engine passes ServerArgs fields the package lacks: {sorted(ours - fields)}"
    assert not fake.server_arg_names - fields, f"the fake accepts fields the package lacks: {sorted(fake.server_arg_names - fields)}"


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_engine_methods_and_async_generate_parameters_exist(runtime, fake, engine, recorded):
    engine_class = methods(find_class(parse(runtime["wheel"], runtime["engine"]), "Engine"))
    assert {"__init__", "async_generate", "shutdown"} <= set(engine_class)
    assert "tokenizer_manager" in self_attributes(engine_class["__init__"])
    accepted = parameters(engine_class["async_generate"])
    for names in (recorded(engine)["async_generate"], fake_sglang.ASYNC_GENERATE_PARAMS):
        assert not names - accepted, f"async_generate has no parameter(s) {sorted(names - accepted)}"


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_abort_by_rid_exists(runtime, fake, engine):
    manager = find_class(parse(runtime["wheel"], runtime["tokenizer_manager"]), "TokenizerManager")
    assert "rid" in parameters(methods(manager)["abort_request"])
    assert "rid_to_state" in self_attributes(manager)


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_sampling_params_exist(runtime, fake, engine, recorded):
    fields = declared_fields(find_class(parse(runtime["wheel"], runtime["sampling_params"]), "SamplingParams"))
    for names in (recorded(engine)["sampling_params"], fake_sglang.SAMPLING_PARAMS):
        assert not names - fields, f"SamplingParams has no field(s) {sorted(names - fields)}"


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_chunk_protocol_matches_the_fake(runtime, fake, engine):
    """The meta_info keys and finish reason types our engine reads are what SGLang writes."""
    manager = parse(runtime["wheel"], runtime["tokenizer_manager"])
    dict_keys = {key.value for node in ast.walk(manager) if isinstance(node, ast.Dict) for key in node.keys if isinstance(key, ast.Constant)}
    assert {"text", "meta_info", "finish_reason", "prompt_tokens", "completion_tokens"} <= dict_keys
    batch = parse(runtime["wheel"], runtime["schedule_batch"])
    types = {
        value.value
        for node in ast.walk(batch)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values)
        if isinstance(key, ast.Constant) and key.value == "type" and isinstance(value, ast.Constant)
    }
    assert {"stop", "length", "abort"} <= types


@pytest.mark.parametrize("runtime, fake, engine", RUNTIMES)
def test_import_sets_the_uvloop_policy_as_the_fake_does(runtime, fake, engine):
    """Why the engine guards the event loop policy: the engine module sets uvloop's at import."""
    module = parse(runtime["wheel"], runtime["engine"])
    top_level_calls = [ast.unparse(node.value) for node in module.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    assert "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())" in top_level_calls


def test_sglang_exposes_engine_lazily():
    assigned = {
        target.id: ast.unparse(node.value)
        for node in parse("sglang", "sglang/__init__.py").body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert assigned["Engine"] == "LazyImport('sglang.srt.entrypoints.engine', 'Engine')"


def test_sglang_kt_exposes_engine():
    tree = parse("sglang_kt", "sglang/__init__.py")
    names = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assigned = {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)}
    assert "Engine" in names | assigned


def test_kt_defaults_are_what_kt_run_passes():
    run = parse("kt_kernel", "kt_kernel/cli/commands/run.py")
    defaults = {
        node.args[1].value: node.args[2].value
        for node in ast.walk(run)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "resolve" and len(node.args) == 3
        and all(isinstance(arg, ast.Constant) for arg in node.args[1:])
    }
    assert defaults["inference.kt_method"] == KT_RUN_DEFAULTS["kt_method"]
    assert defaults["inference.gpu_experts"] == KT_RUN_DEFAULTS["kt_num_gpu_experts"]
    assert defaults["inference.kt_gpu_prefill_token_threshold"] == KT_RUN_DEFAULTS["kt_gpu_prefill_token_threshold"]
    flags = {node.value for node in ast.walk(run) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    for name in set(KT_RUN_DEFAULTS) | {"kt_weight_path", "kt_cpuinfer", "kt_threadpool_count"}:
        assert "--" + name.replace("_", "-") in flags, f"kt run does not pass {name}"


def test_kt_kernel_names_the_engine_reads_exist():
    init = ast.unparse(parse("kt_kernel", "kt_kernel/__init__.py"))
    assert "__cpu_variant__ =" in init and "from .experts import" in init and "kt_kernel_ext = _kt_kernel_ext" in init
    experts = parse("kt_kernel", "kt_kernel/experts.py")
    methods_assigned = next(
        node.value for node in experts.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "INFERENCE_METHODS" for t in node.targets)
    )
    methods = {node.value for node in ast.walk(methods_assigned) if isinstance(node, ast.Constant)}
    assert {KT_RUN_DEFAULTS["kt_method"], *_METHOD_KERNELS, "BF16", "LLAMAFILE"} <= methods
    amx = ast.unparse(parse("kt_kernel", "kt_kernel/utils/amx.py"))
    for kernel in _METHOD_KERNELS.values():
        assert f"getattr(_moe_mod, '{kernel}', None)" in amx
