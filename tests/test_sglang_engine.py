"""The SGLang engine against a FAKE SGLang runtime (tests/fake_sglang.py).

SGLang needs an NVIDIA GPU, so these tests check our adapter, not SGLang: the prompt and
sampling settings we send, stream deltas from cumulative text, finish reasons, n > 1,
cancellation by rid, media passing, and that SGLang's import cannot change the web app's event
loop. tests/test_runtime_interfaces.py checks our calls against the real package's signatures;
bench/gpu_smoke.py runs the same contract against the real runtime on a GPU machine.
"""

from __future__ import annotations

import asyncio
import json
import io
import sys
import wave

import numpy as np
import pytest
import torch
import uvloop
from PIL import Image

from engines import BackendUnavailableError, ChatError, ChatModel, ConfigError, MediaError
from harness import tiny_models
from tests import fake_sglang
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract


def start(settings: dict) -> ChatModel:
    """A ChatModel on the fake runtime. The engine refuses to start without a GPU, which the
    fake does not need: one is pretended while it starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: True)
        return ChatModel(settings)


@pytest.fixture(scope="module")
def sglang_model():
    with fake_sglang.installed(), start({"infer_backend": "sglang"}) as model:
        yield model


def runtime(model: ChatModel) -> fake_sglang.Engine:
    return model.engine.model


class TestSGLangContract(EngineContract):
    writes_model_text = False  # the FAKE runtime writes words from the prompt, no model's

    @pytest.fixture
    def model(self, sglang_model):
        return sglang_model


async def test_sglang_import_leaves_the_app_event_loop_policy_alone():
    policy = asyncio.get_event_loop_policy()
    with fake_sglang.installed(), start({"infer_backend": "sglang"}) as model:
        installed = sys.modules["sglang"].installed_policy
        assert isinstance(installed, uvloop.EventLoopPolicy), "the fake did not do what SGLang's import does"
        assert asyncio.get_event_loop_policy() is policy
        loop = asyncio.new_event_loop()
        try:
            assert not isinstance(loop, uvloop.Loop)
        finally:
            loop.close()
        # This test's own loop still runs, next to the engine's.
        [reply] = await model.achat(QUESTION, temperature=0, max_new_tokens=3)
        await asyncio.sleep(0)
        assert reply.response_length == 3


def test_text_prompt_goes_as_token_ids_and_greedy_as_temperature_zero(sglang_model):
    engine = sglang_model.engine
    sglang_model.chat(QUESTION, temperature=0, max_new_tokens=7, top_p=0.5, stop=["zzz"])
    call = runtime(sglang_model).calls[-1]
    prompt = sglang_model.render_prompt(QUESTION)
    assert call["prompt"] is None
    assert call["input_ids"] == engine.tokenizer(prompt, add_special_tokens=False).input_ids
    assert call["stream"] is True and call["rid"]
    assert call["sampling_params"] == {
        "max_new_tokens": 7, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0,
        "stop": ["zzz"], "skip_special_tokens": True, "temperature": 0.0,
    }


def test_sampled_settings_and_extra_penalties_reach_sglang(sglang_model):
    sglang_model.chat(QUESTION, temperature=0.8, top_p=0.7, top_k=0, max_new_tokens=4, seed=11,
                      presence_penalty=0.5, frequency_penalty=-0.25)
    params = runtime(sglang_model).calls[-1]["sampling_params"]
    assert params["temperature"] == 0.8 and params["top_p"] == 0.7
    assert params["top_k"] == -1, "top_k=0 (off) is SGLang's -1"
    assert params["sampling_seed"] == 11
    assert params["presence_penalty"] == 0.5 and params["frequency_penalty"] == -0.25


def test_reply_formats_reach_sglang_as_its_json_schema(sglang_model):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    sglang_model.chat(QUESTION, max_new_tokens=3, response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
    assert json.loads(runtime(sglang_model).calls[-1]["sampling_params"]["json_schema"]) == schema
    sglang_model.chat(QUESTION, max_new_tokens=3, response_format={"type": "json_object"})
    assert json.loads(runtime(sglang_model).calls[-1]["sampling_params"]["json_schema"]) == {"type": "object"}
    calls = len(runtime(sglang_model).calls)
    lookbehind = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(?<=a)b"}}}
    with pytest.raises(ConfigError, match=r"xgrammar cannot compile response_format.json_schema.schema.properties.code: .*Lookbehind"):
        sglang_model.chat(QUESTION, response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": lookbehind}})
    assert len(runtime(sglang_model).calls) == calls, "a schema SGLang cannot compile never reaches it"


def test_out_of_range_values_come_back_as_clear_errors(sglang_model):
    with pytest.raises(ConfigError, match=r"presence_penalty must be in \[-2, 2\]"):
        sglang_model.chat(QUESTION, presence_penalty=3.0)
    with pytest.raises(ConfigError, match=r"repetition_penalty must be in \[0.01, 2\]"):
        sglang_model.chat(QUESTION, repetition_penalty=2.5)
    assert runtime(sglang_model).tokenizer_manager.rid_to_state == {}


def test_sampled_n_are_separate_requests_with_their_own_seeds(sglang_model):
    calls = runtime(sglang_model).calls
    before = len(calls)
    responses = sglang_model.chat(LONG_REQUEST, temperature=1.0, max_new_tokens=12, num_return_sequences=3, seed=5)
    new_calls = calls[before:]
    assert sorted(call["sampling_params"]["sampling_seed"] for call in new_calls) == [5, 6, 7]
    assert len({call["rid"] for call in new_calls}) == 3
    assert len({response.response_text for response in responses}) == 3


def test_greedy_n_is_generated_once_and_copied(sglang_model):
    calls = runtime(sglang_model).calls
    before = len(calls)
    responses = sglang_model.chat(QUESTION, temperature=0, max_new_tokens=8, num_return_sequences=2)
    assert len(calls) == before + 1
    assert len(responses) == 2 and responses[0] == responses[1]


def test_end_token_finishes_with_stop_and_is_counted(sglang_model):
    [reply] = sglang_model.chat(QUESTION, temperature=0, max_new_tokens=500)
    assert reply.finish_reason == "stop"
    text_tokens = len(sglang_model.engine.tokenizer(reply.response_text, add_special_tokens=False).input_ids)
    assert reply.response_length == text_tokens + 1


def test_stop_string_split_over_tokens_is_never_shown(sglang_model):
    [free] = sglang_model.chat(QUESTION, temperature=0, max_new_tokens=30)
    words = free.response_text.split()
    # Two words: the runtime's running text shows the first one before the stop string is complete.
    stop = f"{words[3]} {words[4]}"
    pieces = list(sglang_model.stream_chat(QUESTION, temperature=0, max_new_tokens=30, stop=[stop]))
    expected = free.response_text[: free.response_text.index(stop)]
    assert "".join(pieces) == expected
    assert len(pieces) > 3


def test_incremental_output_gives_the_same_stream(sglang_model):
    settings = {"temperature": 0, "max_new_tokens": 20}
    cumulative = list(sglang_model.stream_chat(QUESTION, **settings))
    with fake_sglang.installed(), start({"infer_backend": "sglang", "engine_args": {"incremental_streaming_output": True}}) as model:
        incremental = list(model.stream_chat(QUESTION, **settings))
        assert model.engine.model.server_args["incremental_streaming_output"] is True
    assert incremental == cumulative and len(cumulative) > 5


async def test_closing_a_stream_aborts_its_request_by_rid(sglang_model):
    fake = runtime(sglang_model)
    stream = sglang_model.astream_chat(LONG_REQUEST, temperature=0, max_new_tokens=2000)
    async for _ in stream:
        break
    await stream.aclose()
    rid = fake.calls[-1]["rid"]
    assert rid in fake.tokenizer_manager.aborted
    assert fake.generated[rid] < 50
    assert fake.tokenizer_manager.rid_to_state == {}


async def test_cancelling_chat_aborts_every_sample(sglang_model):
    fake = runtime(sglang_model)
    before = len(fake.calls)
    task = asyncio.ensure_future(sglang_model.achat(LONG_REQUEST, temperature=1.0, max_new_tokens=2000, num_return_sequences=2))
    while len(fake.calls) < before + 2:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The caller's cancellation reaches the engine loop a moment later.
    for _ in range(100):
        if not fake.tokenizer_manager.rid_to_state:
            break
        await asyncio.sleep(0.02)
    rids = [call["rid"] for call in fake.calls[before:]]
    assert fake.tokenizer_manager.rid_to_state == {}
    assert all(fake.generated[rid] < 1000 for rid in rids)


async def test_abort_by_someone_else_is_an_error_not_a_short_reply(sglang_model):
    fake = runtime(sglang_model)
    before = len(fake.calls)
    task = asyncio.ensure_future(sglang_model.achat(LONG_REQUEST, temperature=0, max_new_tokens=2000))
    while len(fake.calls) == before or not fake.tokenizer_manager.rid_to_state:
        await asyncio.sleep(0.01)
    fake.tokenizer_manager.abort_request(fake.calls[-1]["rid"])
    with pytest.raises(ChatError, match="SGLang stopped the request"):
        await task


def test_unknown_engine_argument_is_named():
    with fake_sglang.installed(), pytest.raises(ConfigError, match="no_such_option"):
        start({"infer_backend": "sglang", "engine_args": {"no_such_option": 1}})


def test_close_shuts_the_runtime_down():
    with fake_sglang.installed():
        model = start({"infer_backend": "sglang"})
        fake = runtime(model)
        model.close()
    assert fake.shut_down


def test_without_a_gpu_the_message_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with fake_sglang.installed(), pytest.raises(BackendUnavailableError, match="needs an NVIDIA GPU"):
        ChatModel({"infer_backend": "sglang"})


@pytest.fixture(scope="module")
def qwen2_vl_dir(tmp_path_factory):
    return str(tiny_models.build_qwen2_vl(tmp_path_factory.mktemp("qwen2-vl")))


def test_images_are_regularised_and_passed_with_the_models_own_tokens(qwen2_vl_dir, tmp_path):
    image_path = tmp_path / "red.png"
    Image.new("RGBA", (32, 24), "red").save(image_path)
    with fake_sglang.installed(), start({"infer_backend": "sglang", "model_name_or_path": qwen2_vl_dir}) as model:
        assert "image" in model.engine.media_kinds
        model.chat([{"role": "user", "content": "What is shown?"}], images=[str(image_path)], max_new_tokens=2)
        call = runtime(model).calls[-1]
        with pytest.raises(MediaError, match="does not exist"):
            model.chat(QUESTION, images=[str(tmp_path / "nowhere.png")])
    [image] = call["image_data"]
    assert (image.mode, image.size, image.getpixel((0, 0))) == ("RGB", (32, 24), (255, 0, 0))
    assert call["input_ids"] is None
    user_turn = call["prompt"].split("<|im_start|>user\n")[1]
    assert user_turn.startswith("<|vision_start|><|image_pad|><|vision_end|>What is shown?")


def test_video_frames_are_passed(qwen2_vl_dir):
    frames = [Image.new("RGB", (28, 28), color) for color in ("red", "green", "blue", "white")]
    with fake_sglang.installed(), start({"infer_backend": "sglang", "model_name_or_path": qwen2_vl_dir}) as model:
        if "video" not in model.engine.media_kinds:
            pytest.skip("the model's video processor needs torchvision, which is not installed here")
        model.chat([{"role": "user", "content": "What happens?"}], videos=[frames], max_new_tokens=2)
        call = runtime(model).calls[-1]
    [video] = call["video_data"]
    assert video.shape == (4, 28, 28, 3)
    assert "<|vision_start|><|video_pad|><|vision_end|>What happens?" in call["prompt"]


def test_text_template_gets_the_processors_image_token(tmp_path):
    llava_dir = str(tiny_models.build_llava(tmp_path / "llava"))
    with fake_sglang.installed(), start({"infer_backend": "sglang", "model_name_or_path": llava_dir}) as model:
        assert model.engine.media_kinds == {"image"}
        model.chat([{"role": "user", "content": "Describe <image> please."}], images=[Image.new("RGB", (8, 8), "blue")], max_new_tokens=2)
        call = runtime(model).calls[-1]
    assert len(call["image_data"]) == 1
    assert "USER: Describe <image> please." in call["prompt"]


def test_audio_reaches_sglang_as_wav_at_the_models_rate(tmp_path):
    audio_dir = str(tiny_models.build_qwen2_audio(tmp_path / "qwen2-audio"))
    samples = (np.sin(np.linspace(0, 300, 8000)) * 0.5).astype(np.float32)
    with fake_sglang.installed(), start({"infer_backend": "sglang", "model_name_or_path": audio_dir}) as model:
        assert model.engine.media_kinds == {"audio"}
        model.chat([{"role": "user", "content": "What is this sound?"}], audios=[(samples, 16000)], max_new_tokens=2)
        call = runtime(model).calls[-1]
    [data] = call["audio_data"]
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == (16000, 1, 8000)
        decoded = np.frombuffer(wav.readframes(8000), dtype="<i2") / 32767
    assert np.allclose(decoded, samples, atol=1e-4)
    assert "<|AUDIO|>" in call["prompt"]


def test_serving_settings_take_sglang_names_and_lora_adapters_answer_by_name(tmp_path):
    adapter = tmp_path / "tiny-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    settings = {"infer_backend": "sglang", "max_model_len": 1024, "gpu_memory_utilization": 0.8,
                "tensor_parallel_size": 2, "enforce_eager": True, "lora_adapters": [str(adapter)]}
    with fake_sglang.installed(), start(settings) as model:
        server_args = runtime(model).server_args
        assert {name: server_args[name] for name in ("context_length", "mem_fraction_static", "tp_size", "disable_cuda_graph")} == {
            "context_length": 1024, "mem_fraction_static": 0.8, "tp_size": 2, "disable_cuda_graph": True,
        }
        assert server_args["enable_lora"] is True and server_args["lora_paths"] == [f"tiny-lora={adapter}"]
        model.chat(QUESTION, max_new_tokens=2)
        model.chat(QUESTION, max_new_tokens=2, lora_adapter="")
        assert [call["lora_path"] for call in runtime(model).calls] == ["tiny-lora", None]
        with pytest.raises(ConfigError, match="No LoRA adapter named 'nope'"):
            model.chat(QUESTION, lora_adapter="nope")
    # A setting SGLang has no equivalent for is refused before anything starts, naming who takes it.
    with pytest.raises(ConfigError, match="the sglang backend does not use kv_cache_space_gb.*taken by vllm"):
        start({"infer_backend": "sglang", "kv_cache_space_gb": 2})
