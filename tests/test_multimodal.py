"""Images, video and audio through the HF engine, on tiny random-weight Qwen2-VL, LLaVA and
Qwen2-Audio models with their real processors (harness/tiny_models.py).

Each test looks at what model.generate really receives: the media tokens in input_ids, per file
and per turn, and the pixel / audio tensors. Replies are noise and are not looked at.
"""

import importlib.util

import numpy as np
import pytest

from engines import ChatModel, ConfigError, MediaError
from engines.prompt.media import load_image
from media_samples import solid_image, tone, write_audio, write_video
from harness.tiny_models import build_llava, build_qwen2_audio, build_qwen2_vl

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
GREEDY = {"temperature": 0, "max_new_tokens": 4}

# An 80x60 image: Qwen2-VL resizes it to 84x56 (multiples of 28) = 6x4 patches of 14, merged
# 2x2 into 6 tokens. A 40x100 image becomes 28x112 = 2x8 patches, 4 tokens.
RED, BLUE = solid_image((255, 0, 0), (80, 60)), solid_image((0, 0, 255), (40, 100))
QWEN_TOKENS = {"red": 6, "blue": 4}
# LLaVA's CLIP tower sees 56x56 in 14 px patches: 16 tokens for every image.
LLAVA_TOKENS = 16


def _load(path) -> ChatModel:
    return ChatModel({"model_name_or_path": str(path), **GREEDY})


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    with _load(build_qwen2_vl(tmp_path_factory.mktemp("qwen2_vl"))) as model:
        yield model


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    with _load(build_llava(tmp_path_factory.mktemp("llava"))) as model:
        yield model


@pytest.fixture(scope="module")
def qwen2_audio(tmp_path_factory):
    with _load(build_qwen2_audio(tmp_path_factory.mktemp("qwen2_audio"))) as model:
        yield model


@pytest.fixture
def received(monkeypatch):
    """Returns a function that starts recording what a model's generate gets and returns."""

    def watch(model: ChatModel) -> list[dict]:
        calls = []
        original = model.engine.model.generate

        def recording_generate(**inputs):
            output = original(**inputs)
            calls.append({**inputs, "output": output})
            return output

        monkeypatch.setattr(model.engine.model, "generate", recording_generate)
        return calls

    return watch


def _count(ids, token_id) -> int:
    return int((ids == token_id).sum())


def _turns(model: ChatModel, ids) -> list[str]:
    """The prompt the model got, split at each message start (ChatML templates)."""
    return model.engine.tokenizer.decode(ids[0]).split("<|im_start|>")[1:]


# ---- what each model takes


def test_media_kinds_come_from_each_processor(qwen2_vl, llava, qwen2_audio):
    assert qwen2_vl.engine.media_kinds == ({"image", "video"} if HAS_TORCHVISION else {"image"})
    assert llava.engine.media_kinds == {"image"}
    assert qwen2_audio.engine.media_kinds == {"audio"}


def test_media_of_a_kind_the_model_does_not_take_is_refused(llava, qwen2_audio):
    with pytest.raises(MediaError, match="This model does not accept audios"):
        llava.chat([{"role": "user", "content": "hi"}], audios=[(tone(1, 16000), 16000)])
    with pytest.raises(MediaError, match="This model does not accept images"):
        qwen2_audio.chat([{"role": "user", "content": "hi"}], images=[RED])


# ---- images


def test_qwen2_vl_two_images_in_one_turn_get_their_own_tokens_and_pixels(qwen2_vl, received):
    calls = received(qwen2_vl)
    [reply] = qwen2_vl.chat([{"role": "user", "content": "Compare <image> with <image>."}], images=[RED, BLUE])
    inputs = calls[0]
    processor = qwen2_vl.engine.prompts.media.processor
    ids = inputs["input_ids"]
    # The template's content parts: each image wrapped in the vision start/end tokens.
    assert "Compare <|vision_start|><|image_pad|>" in _turns(qwen2_vl, ids)[1]
    assert _count(ids, processor.image_token_id) == QWEN_TOKENS["red"] + QWEN_TOKENS["blue"]
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 6], [1, 8, 2]]
    # One row per 14x14 patch, 2 frames x 3 channels x 14 x 14 values each, red's rows first.
    assert inputs["pixel_values"].shape == (24 + 16, 3 * 2 * 14 * 14)
    alone = processor.image_processor(images=[load_image(RED, "red", 768 * 768)], return_tensors="pt")
    assert np.allclose(inputs["pixel_values"][:24].float().numpy(), alone["pixel_values"].numpy(), atol=1e-2)
    # Generation ran to the end on top of that prompt.
    assert reply.prompt_length == ids.shape[1]
    assert inputs["output"].shape[1] == ids.shape[1] + reply.response_length


def test_qwen2_vl_images_across_two_turns_stay_in_their_turn(qwen2_vl, received):
    calls = received(qwen2_vl)
    messages = [
        {"role": "user", "content": "<image> What color is this?"},
        {"role": "assistant", "content": "Red."},
        {"role": "user", "content": "And this one? <image>"},
    ]
    qwen2_vl.chat(messages, images=[RED, BLUE])
    system, first, answer, second, _ = _turns(qwen2_vl, calls[0]["input_ids"])
    assert first.count("<|image_pad|>") == QWEN_TOKENS["red"] and "What color" in first
    assert "<|image_pad|>" not in answer and "<|image_pad|>" not in system
    assert second.count("<|image_pad|>") == QWEN_TOKENS["blue"] and second.startswith("user\nAnd this one? <|vision_start|>")


def test_images_without_placeholders_go_to_the_start_of_the_first_user_message(qwen2_vl, received):
    calls = received(qwen2_vl)
    messages = [{"role": "user", "content": "First question"}, {"role": "assistant", "content": "Ok."}, {"role": "user", "content": "Second"}]
    qwen2_vl.chat(messages, images=[RED, RED])
    first = _turns(qwen2_vl, calls[0]["input_ids"])[1]
    assert first.startswith("user\n<|vision_start|>") and first.count("<|image_pad|>") == 2 * QWEN_TOKENS["red"]
    assert messages[0]["content"] == "First question"  # the caller's conversation is not changed


def test_llava_plain_text_template_gets_the_processor_image_token(llava, received, tmp_path):
    calls = received(llava)
    path = tmp_path / "blue.png"
    BLUE.save(path)
    messages = [
        {"role": "user", "content": "<image> What is it?"},
        {"role": "assistant", "content": "A square."},
        {"role": "user", "content": "And <image>?"},
    ]
    [reply] = llava.chat(messages, images=[RED, str(path)])
    inputs = calls[0]
    processor = llava.engine.prompts.media.processor
    text = llava.engine.tokenizer.decode(inputs["input_ids"][0])
    first, second = text.split("ASSISTANT: A square.")
    assert first.count("<image>") == LLAVA_TOKENS and second.count("<image>") == LLAVA_TOKENS
    assert _count(inputs["input_ids"], processor.image_token_id) == 2 * LLAVA_TOKENS
    assert inputs["pixel_values"].shape == (2, 3, 56, 56)
    # The red image is first: its red channel is high, the blue image's is low (CLIP-normalized).
    assert inputs["pixel_values"][0, 0].mean() > 1 > inputs["pixel_values"][1, 0].mean()
    assert reply.response_length >= 1


def test_streaming_with_an_image_runs_to_the_end(llava, received):
    calls = received(llava)
    pieces = list(llava.stream_chat([{"role": "user", "content": "Describe"}], images=[RED], max_new_tokens=6))
    assert calls and "pixel_values" in calls[0]
    new_tokens = calls[0]["output"].shape[1] - calls[0]["input_ids"].shape[1]
    assert 1 <= new_tokens <= 6 and 1 <= len(pieces) <= new_tokens


def test_the_pixel_budget_setting_limits_what_the_model_sees(tmp_path, received):
    big = solid_image((0, 255, 0), (400, 300))
    with _load(build_qwen2_vl(tmp_path / "model")) as default:
        default_calls = received(default)
        default.chat([{"role": "user", "content": "?"}], images=[big])
    with ChatModel({"model_name_or_path": str(tmp_path / "model"), "image_max_pixels": 64 * 48, **GREEDY}) as small:
        small_calls = received(small)
        small.chat([{"role": "user", "content": "?"}], images=[big])
    # Default budget: the processor's own maximum applies (84x112 px, 12 tokens); with a budget of
    # 64x48 the image reaches the processor at that size (56x56 px after its rounding, 4 tokens).
    assert default_calls[0]["image_grid_thw"].tolist() == [[1, 6, 8]]
    assert small_calls[0]["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_media_settings_must_be_positive():
    with pytest.raises(ConfigError, match=r"video_max_frames must be above 0 \(frames per video at most, spread over its length\), got 0"):
        ChatModel({"video_max_frames": 0})


# ---- placeholders and bad media


def test_placeholder_and_file_counts_must_match(llava):
    with pytest.raises(MediaError, match=r"2 <image> placeholder\(s\) but 1 image file\(s\)"):
        llava.chat([{"role": "user", "content": "<image> and <image>"}], images=[RED])


def test_a_media_token_typed_without_a_file_is_refused(llava):
    with pytest.raises(MediaError, match=r"remove <image> from the message text, or give one image for each"):
        llava.chat([{"role": "user", "content": "What does the <image> tag do in HTML?"}])


def test_a_typed_placeholder_is_named_as_typed_where_the_model_token_differs(qwen2_vl):
    with pytest.raises(MediaError, match=r"remove <image> \(or <\|image_pad\|>\) from the message text, or give one image for each"):
        qwen2_vl.chat([{"role": "user", "content": "What does the <image> tag do?"}])


def test_bad_image_is_a_clear_error_and_the_model_keeps_serving(llava, received, tmp_path):
    broken = tmp_path / "holiday.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    messages = [{"role": "user", "content": "What is this?"}]
    with pytest.raises(MediaError, match=r"image 2 \(holiday.jpg\) is not an image this app can read"):
        llava.chat(messages, images=[RED, str(broken)])
    assert messages == [{"role": "user", "content": "What is this?"}]
    calls = received(llava)
    llava.chat(messages, images=[RED])
    assert calls[0]["pixel_values"].shape == (1, 3, 56, 56)


# ---- audio


def test_qwen2_audio_gets_one_token_run_and_features_per_clip(qwen2_audio, received, tmp_path):
    calls = received(qwen2_audio)
    stereo = write_audio(tmp_path / "stereo.wav", tone(3.0, 44100, channels=2), 44100)
    messages = [
        {"role": "user", "content": "<audio> What is this sound?"},
        {"role": "assistant", "content": "A tone."},
        {"role": "user", "content": "<audio> And this?"},
    ]
    [reply] = qwen2_audio.chat(messages, audios=[str(stereo), (tone(1.0, 16000), 16000)])
    inputs = calls[0]
    processor = qwen2_audio.engine.prompts.media.processor
    # Whisper features: 100 frames per second (hop 160 at 16 kHz), two stride-2 steps: 3 s -> 75 tokens, 1 s -> 25.
    assert inputs["input_features"].shape == (2, 128, 3000)
    assert inputs["feature_attention_mask"].sum(-1).tolist() == [300, 100]
    system, first, answer, second, _ = _turns(qwen2_audio, inputs["input_ids"])
    assert first.count("<|AUDIO|>") == 75 and second.count("<|AUDIO|>") == 25 and "<|AUDIO|>" not in answer
    assert _count(inputs["input_ids"], processor.audio_token_id) == 100
    assert reply.prompt_length == inputs["input_ids"].shape[1]


def test_audio_longer_than_the_model_hears_is_refused_not_cut(qwen2_audio):
    with pytest.raises(MediaError, match=r"audio 1 is 45 s long; the limit is 30 s \(this model hears at most that much per clip\)"):
        qwen2_audio.chat([{"role": "user", "content": "?"}], audios=[(np.zeros(45 * 16000, np.float32), 16000)])


# ---- video


@pytest.mark.skipif(HAS_TORCHVISION, reason="checks the message shown where torchvision is missing")
def test_video_without_torchvision_names_what_to_install(qwen2_vl, tmp_path):
    clip = write_video(tmp_path / "clip.mp4")
    with pytest.raises(MediaError, match="video processors need torchvision, which is not installed"):
        qwen2_vl.chat([{"role": "user", "content": "<video> What happens?"}], videos=[str(clip)])


@pytest.mark.video
def test_qwen2_vl_video_frames_become_video_tokens(qwen2_vl, received, tmp_path):
    calls = received(qwen2_vl)
    clip = write_video(tmp_path / "clip.mp4", seconds=3.0, fps=10, size=(64, 48))
    [reply] = qwen2_vl.chat([{"role": "user", "content": "<video> What happens?"}], videos=[str(clip)])
    inputs = calls[0]
    processor = qwen2_vl.engine.prompts.media.processor
    # 3 s at the default 2 frames per second = 6 frames, paired in time (temporal patch 2) = 3;
    # 64x48 resized to 56x56 = 4x4 patches: 3*4*4 = 48 patch rows, merged 2x2 into 12 tokens.
    assert inputs["video_grid_thw"].tolist() == [[3, 4, 4]]
    assert inputs["pixel_values_videos"].shape == (48, 3 * 2 * 14 * 14)
    assert _count(inputs["input_ids"], processor.video_token_id) == 12
    assert "<|vision_start|><|video_pad|>" in _turns(qwen2_vl, inputs["input_ids"])[1]
    assert inputs["output"].shape[1] == inputs["input_ids"].shape[1] + reply.response_length


@pytest.mark.video
def test_qwen2_vl_video_and_images_across_turns(qwen2_vl, received, tmp_path):
    calls = received(qwen2_vl)
    short = write_video(tmp_path / "short.mp4", seconds=2.0, fps=10, size=(64, 48))
    messages = [
        {"role": "user", "content": "<image> and <video>: same color?"},
        {"role": "assistant", "content": "No."},
        {"role": "user", "content": "Now <image>"},
    ]
    qwen2_vl.chat(messages, images=[RED, BLUE], videos=[str(short)])
    inputs = calls[0]
    _, first, _, second, _ = _turns(qwen2_vl, inputs["input_ids"])
    # 2 s at 2 fps = 4 frames = 2 time steps of 4x4 patches: 8 tokens.
    assert first.count("<|video_pad|>") == 8 and first.count("<|image_pad|>") == QWEN_TOKENS["red"]
    assert second.count("<|image_pad|>") == QWEN_TOKENS["blue"] and "<|video_pad|>" not in second
    assert inputs["video_grid_thw"].tolist() == [[2, 4, 4]]
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 6], [1, 8, 2]]


@pytest.mark.video
def test_unreadable_video_is_a_clear_error_with_torchvision(qwen2_vl, tmp_path):
    broken = tmp_path / "party.mp4"
    broken.write_bytes(b"garbage" * 100)
    with pytest.raises(MediaError, match=r"video 1 \(party.mp4\) could not be opened as a video"):
        qwen2_vl.chat([{"role": "user", "content": "<video>?"}], videos=[str(broken)])
