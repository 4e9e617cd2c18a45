"""The HF engine on the real embedded model: the shared contract plus what is special to it."""

from __future__ import annotations

import asyncio
import math
import json
import os
import time

import psutil
import pytest
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from engines import (
    PromptRead,
    BackendUnavailableError,
    ChatModel,
    ChatTemplateError,
    ConfigError,
    UnsupportedError,
)
from engines.model_files.backend_registry import unavailable_reason
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract, weights_question


class TestHuggingFaceContract(EngineContract):
    @pytest.fixture
    def model(self, chat_model):
        return chat_model


async def test_cancel_ends_generation_within_a_few_tokens(chat_model):
    engine = chat_model.engine
    generated = []
    original = engine._generate

    def counting_generate(prompt_ids, args, cancel, streamer, *inputs):
        output, cached = original(prompt_ids, args, cancel, streamer, *inputs)
        generated.append(output.shape[1] - prompt_ids.shape[1])
        return output, cached

    engine._generate = counting_generate
    try:
        stream = chat_model.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=2000)
        pieces = 0
        async for _ in stream:
            pieces += 1
            if pieces == 5:
                break
        started = time.perf_counter()
        await stream.aclose()
        closing_seconds = time.perf_counter() - started
    finally:
        del engine._generate
    # aclose returns only after the generation thread has ended, so it ran to completion here.
    assert generated, "generate never returned"
    assert generated[0] <= 5 + 5, f"generation went on for {generated[0]} tokens after the consumer left"
    assert closing_seconds < 5
    assert engine.line.running == 0


# The chunking at a smaller size than the engine's, on a prompt of seven such chunks: what holds for
# 512-token chunks of a 3,500-token prompt holds here, at a quarter of the prefill (minutes on CI).
TEST_CHUNK_TOKENS = 128
CHUNKED_PROMPT = weights_question(100)


@pytest.mark.slow
async def test_stop_while_a_long_prompt_is_evaluated_frees_the_model_within_a_chunk(chat_model, monkeypatch):
    """The prompt is evaluated in chunks (engines/backends/huggingface.py), which gives the same reply as
    one pass but for rounding, and a Stop during it takes effect at the next chunk rather than after the prompt."""
    import engines.backends.huggingface

    monkeypatch.setattr(engines.backends.huggingface, "PREFILL_CHUNK_TOKENS", TEST_CHUNK_TOKENS)
    monkeypatch.setattr(chat_model.engine, "_kept", None)  # each reading here from the start: no conversation kept
    started = time.perf_counter()
    [chunked] = await chat_model.achat(CHUNKED_PROMPT, temperature=0, max_new_tokens=12, logprobs=2)
    whole_prompt = time.perf_counter() - started
    with monkeypatch.context() as one_chunk:
        one_chunk.setattr(engines.backends.huggingface, "PREFILL_CHUNK_TOKENS", 100_000)
        [one_pass] = await chat_model.achat(CHUNKED_PROMPT, temperature=0, max_new_tokens=12, logprobs=2)
    assert chunked.prompt_length > 6 * TEST_CHUNK_TOKENS
    assert_the_same_reply_but_for_near_ties(chunked.logprobs, one_pass.logprobs)

    stream = chat_model.astream_chat(CHUNKED_PROMPT, temperature=0, max_new_tokens=200)
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(whole_prompt / 10)
    assert not first.done(), "the prompt was evaluated already"
    stopped = time.perf_counter()
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await stream.aclose()
    freed = time.perf_counter() - stopped
    print(f"\nStop while a {chunked.prompt_length}-token prompt was evaluated: model free after {freed * 1000:.0f} ms "
          f"(the prompt and 12 tokens take {whole_prompt:.1f} s)")
    assert chat_model.line.running == 0
    assert freed < whole_prompt / 3, f"the prompt went on for {freed:.1f} s after Stop"


# How far two readings of one prompt, summed in different orders, may put a token's log-probability
# apart: bfloat16 holds a logit of about 20 to within 0.125, and the two readings here differed by up
# to 0.11 (AVX-512, no AMX); a different computation (a chunk read against the wrong cache) moves
# them by whole units.
ROUNDING = 0.3


def assert_the_same_reply_but_for_near_ties(first, second):
    """Two greedy replies to one prompt agree token for token, each with the same log-probability
    within rounding, up to a step where the two likeliest tokens are within rounding of each other:
    transformers promises logits equal within rounding, not bit for bit (AVX-512 kernels round
    otherwise than AVX2 ones), so from such a near tie each reply may go its own way."""
    for step, (a, b) in enumerate(zip(first, second, strict=True)):
        if a.chosen.token != b.chosen.token:
            for chosen, other in ((a, b), (b, a)):
                alternatives = {alternative.token: alternative.logprob for alternative in chosen.top}
                assert chosen.chosen.logprob - alternatives.get(other.chosen.token, -math.inf) < ROUNDING, (
                    f"step {step}: {other.chosen.token!r} is no near tie of {chosen.chosen.token!r} ({chosen.top})")
            return
        assert abs(a.chosen.logprob - b.chosen.logprob) < ROUNDING, f"step {step}: {a.chosen} against {b.chosen}"


async def test_one_slot_runs_requests_one_after_another_and_loop_stays_responsive(chat_model):
    assert chat_model.model_args.max_concurrent == 1
    spans = {}
    gaps = []

    async def ticker():
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def timed(name):
        first = None
        async for _ in chat_model.astream_chat(QUESTION, temperature=0, max_new_tokens=16):
            first = first or time.perf_counter()
        spans[name] = (first, time.perf_counter())

    tick = asyncio.create_task(ticker())
    await asyncio.gather(timed("a"), timed("b"))
    tick.cancel()
    (first_a, end_a), (first_b, end_b) = sorted(spans.values())
    assert first_b >= end_a, "the second request started generating before the first finished"
    assert max(gaps) < 0.5, f"the event loop was blocked for {max(gaps):.2f} s"


@pytest.fixture(scope="module")
def float32_model():
    """The default model in float32, whose steps and one pass over the same text agree closely
    (in bf16 they round apart by up to 0.25 on a token)."""
    with ChatModel({"infer_backend": "huggingface", "infer_dtype": "float32"}) as model:
        yield model


@pytest.mark.parametrize("settings", [{"temperature": 0}, {"temperature": 1.5, "top_k": 5, "repetition_penalty": 1.3, "seed": 0}],
                         ids=["greedy", "sampled-with-penalty"])
def test_logprobs_are_the_log_softmax_of_the_models_raw_logits(float32_model, settings):
    """Against one forward pass over prompt and reply: the values, and the alternatives, are those
    of the raw logits, which neither temperature nor the repetition penalty changes."""
    import torch

    [reply] = float32_model.chat(QUESTION, max_new_tokens=10, logprobs=4, **settings)
    engine = float32_model.engine
    prompt = engine.tokenizer(float32_model.render_prompt(QUESTION), add_special_tokens=False).input_ids
    # Each token's text spells that token alone (this reply is plain ASCII).
    [reply_ids] = zip(*(engine.tokenizer.encode(token.chosen.token, add_special_tokens=False) for token in reply.logprobs))
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([prompt + list(reply_ids)])).logits[0, len(prompt) - 1:-1]
    expected = torch.log_softmax(logits, dim=-1)
    for step, (token, token_id) in enumerate(zip(reply.logprobs, reply_ids)):
        assert token.chosen.logprob == pytest.approx(expected[step, token_id].item(), abs=0.02)
        assert [top.logprob for top in token.top] == pytest.approx(expected[step].topk(4).values.tolist(), abs=0.02)
    if settings["temperature"] == 0:
        assert all(token.chosen.logprob == token.top[0].logprob for token in reply.logprobs)


def test_greedy_n_returns_n_copies(chat_model):
    responses = chat_model.chat(QUESTION, temperature=0, max_new_tokens=8, num_return_sequences=2)
    assert len(responses) == 2 and responses[0] == responses[1]


def test_defaults_come_from_generation_config(chat_model, default_model_dir):
    with open(os.path.join(default_model_dir, "generation_config.json")) as f:
        saved = json.load(f)
    assert chat_model.generation_defaults.temperature == saved["temperature"]
    assert chat_model.generation_defaults.top_p == saved["top_p"]


def test_constructor_settings_override_model_defaults(default_model_dir):
    with ChatModel({"model_name_or_path": default_model_dir, "temperature": 0.55, "max_new_tokens": 7}) as model:
        assert model.generation_defaults.temperature == 0.55
        [response] = model.chat(LONG_REQUEST)
        assert response.response_length == 7 and response.finish_reason == "length"


def test_unknown_setting_is_named():
    with pytest.raises(ConfigError, match="max_tokens"):
        ChatModel({"max_tokens": 5})


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="huggingface, vllm, sglang, ktransformers, llamacpp, remote; got 'nonsense'"):
        ChatModel({"infer_backend": "nonsense"})


def test_missing_model_path():
    with pytest.raises(ConfigError, match="does not exist"):
        ChatModel({"model_name_or_path": "/no/such/model"})


@pytest.mark.parametrize("backend", ["sglang", "ktransformers"])
def test_backend_not_installed_says_how_to_install(backend):
    if unavailable_reason(backend) is None:
        pytest.skip(f"{backend} is installed here")
    with pytest.raises(BackendUnavailableError, match="pip install"):
        ChatModel({"infer_backend": backend})


def test_model_without_chat_template_gets_a_clear_error(tmp_path, default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, architectures=["LlamaForCausalLM"])
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    # Refused at load time, before anyone types a message into it.
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatModel({"model_name_or_path": str(tmp_path)})
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    with ChatModel({"model_name_or_path": str(tmp_path), "chat_template": template}) as model:
        assert model.render_prompt(QUESTION) == "user: Name three colors.\nassistant:"


def test_reward_scores_padded_batch_equals_one_by_one(reward_model_dir):
    texts = ["A short answer.", "A much longer answer that needs padding when batched with the others.", "Mid size text."]
    with ChatModel({"model_name_or_path": reward_model_dir, "infer_dtype": "float32"}) as model:
        batch = model.get_scores(texts)
        single = [model.get_scores([text])[0] for text in texts]
        assert batch == pytest.approx(single, abs=1e-5)
        assert len(set(round(s, 6) for s in batch)) == 3, "scores should differ between texts"
        with pytest.raises(UnsupportedError, match="reward model"):
            model.chat(QUESTION)


def test_close_frees_memory(default_model_dir):
    process = psutil.Process()
    model = ChatModel({"model_name_or_path": default_model_dir, "infer_dtype": "float32"})
    model.chat(QUESTION, temperature=0, max_new_tokens=2)
    loaded = process.memory_info().rss
    model.close()
    freed = loaded - process.memory_info().rss
    # 135M parameters in float32 are 540 MB.
    assert freed > 300e6, f"close() gave back only {freed / 1e6:.0f} MB"
    with pytest.raises(Exception, match="unloaded"):
        model.chat(QUESTION)


@pytest.mark.slow
def test_loading_another_model_keeps_old_model_on_failure_and_frees_it_on_success(default_model_dir):
    from engines import LoadedModels

    loaded_models = LoadedModels()
    first = loaded_models.load({"model_name_or_path": default_model_dir})
    with pytest.raises(ConfigError, match="does not exist"):
        loaded_models.load({"model_name_or_path": "/no/such/model"})
    assert loaded_models.model is first
    assert first.chat(QUESTION, temperature=0, max_new_tokens=2)[0].response_length == 2
    second = loaded_models.load({"model_name_or_path": default_model_dir, "infer_dtype": "float32"})
    assert loaded_models.model is second and first.engine is None
    assert "on huggingface" in loaded_models.describe()
    loaded_models.unload()
    assert loaded_models.empty and second.engine is None


def parcels_question(items: int) -> list[dict]:
    """About 9 tokens an item, sharing no more than the system prompt with the other questions here."""
    return [{"role": "user", "content": " ".join(f"Parcel {i} travels {i * 3 % 17} miles." for i in range(items))
             + " Which parcel travels farthest?"}]


def tokens_read(model: ChatModel, conversation: list[dict], **options) -> tuple[int, object]:
    """The prompt tokens the model's forward passes read for a greedy reply of 6 tokens (with
    logprobs), and the reply."""
    read = []
    hook = model.engine.model.register_forward_pre_hook(lambda _, args, kwargs: read.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        [reply] = model.chat(conversation, temperature=0, max_new_tokens=6, logprobs=2, **options)
    finally:
        hook.remove()
    return sum(read) - (reply.response_length - 1), reply


@pytest.mark.slow
def test_a_long_chats_next_turn_reads_only_what_is_new_and_replies_as_a_fresh_reading_does(chat_model):
    """The kept conversation's whole 512-token chunks are reused; its last chunk, its reply and the
    new message are read. The reply's every logprob is the one a model without the cache computes."""
    first_turn = parcels_question(120)
    _, first = tokens_read(chat_model, first_turn)
    next_turn = [*first_turn, {"role": "assistant", "content": first.response_text}, {"role": "user", "content": "And the nearest?"}]
    read, taken_up = tokens_read(chat_model, next_turn)
    with ChatModel({"infer_backend": "huggingface", "prompt_cache_gb": 0}) as fresh:
        assert fresh.prompt_cache is None
        read_whole, fresh_reply = tokens_read(fresh, next_turn)
        streamed = list(fresh.stream_reply(next_turn, progress=True, temperature=0, max_new_tokens=2))
    print(f"\nthe next turn of a {taken_up.prompt_length}-token chat read {read} tokens with the kept conversation, {read_whole} without")
    assert read_whole == taken_up.prompt_length
    assert read == taken_up.prompt_length - (first.prompt_length - 1) // 512 * 512
    assert (taken_up.cached_tokens, fresh_reply.cached_tokens) == ((first.prompt_length - 1) // 512 * 512, 0)
    assert chat_model.prompt_cache["hits"] >= 1 and chat_model.prompt_cache["memory_bytes"] > 0
    assert taken_up.logprobs == fresh_reply.logprobs
    # Read in chunks, a long prompt says how far it has got after each but the last.
    assert [(item.read, item.total, item.cached) for item in streamed if isinstance(item, PromptRead)] == [
        (end, taken_up.prompt_length, 0) for end in range(512, taken_up.prompt_length - 1, 512)]
