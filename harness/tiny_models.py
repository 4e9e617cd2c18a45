"""Tiny random-weight multimodal models of real architectures, built offline with real processors.

No multimodal weights can be downloaded in CI, so each builder writes a complete model directory
(config, safetensors, tokenizer, processor config, chat template) of a real architecture at tiny
sizes, and the engine loads it the way it loads a published model. The replies are noise: tests
assert on what the model receives and on the engine's behaviour, never on wording.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2AudioProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    WhisperFeatureExtractor,
)
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<image>",
    "<|audio_bos|>",
    "<|AUDIO|>",
    "<|audio_eos|>",
]

_CORPUS = [
    "You are a helpful assistant. What is in this picture? Describe the image in one sentence.",
    "Compare these two images: which one is brighter? What happens in the video clip?",
    "Listen to the sound and say what it is. A red square, a blue circle and a green triangle.",
] * 20

# Written for these fixtures in the shape of Qwen2-VL's published template: ChatML with structured
# content parts, each vision part wrapped in the vision start/end tokens.
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A plain-text template like older LLaVA fine-tunes ship: it knows nothing of content parts, so
# the engine has to write the processor's own image token into the text.
LLAVA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}USER: {{ message['content'] }}\n"
    "{% else %}ASSISTANT: {{ message['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

# Text model: 2 layers, 2 query heads sharing 1 KV head. Head size 16 by default; vLLM's CPU
# attention kernels take only some head sizes (32, 64, ...), so its tests build with a larger one.
TEXT_LAYERS, TEXT_HEADS, HEAD_SIZE = 2, 2, 16

# Pixel range of the tiny Qwen2-VL: 4 to 16 tokens per image (patch 14, merge 2).
QWEN2_VL_PIXELS = {"shortest_edge": 56 * 56, "longest_edge": 112 * 112}
# CLIP tower of the tiny LLaVA: 56 px / patch 14 = 16 patches, so 16 image tokens.
LLAVA_IMAGE_SIZE, LLAVA_PATCH = 56, 14


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of a few hundred tokens, trained on the fly, with every model's special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _text_config(tokenizer: PreTrainedTokenizerFast, head_size: int, **extra) -> dict:
    hidden = TEXT_HEADS * head_size
    return dict(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=TEXT_LAYERS,
        num_attention_heads=TEXT_HEADS,
        num_key_value_heads=1,
        head_dim=head_size,
        max_position_embeddings=4096,
        **extra,
    )


def _mrope_section(head_size: int) -> list[int]:
    """Qwen2-VL's split of the rotary half of each head into time, height and width ([2, 3, 3] at 16)."""
    half = head_size // 2
    time = half // 4
    height = (half - time) // 2
    return [time, height, half - time - height]


def _save_model(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, out: Path) -> Path:
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    return out


def build_qwen2_vl(out: Path, head_size: int = HEAD_SIZE) -> Path:
    """Qwen2-VL, images and video: one vision block, embed 32, patch 14, merge 2."""
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    token_id = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config=_text_config(
            tokenizer,
            head_size,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": _mrope_section(head_size)},
        ),
        # hidden_size is the width the vision merger hands to the text model.
        vision_config=dict(
            depth=1, embed_dim=32, hidden_size=TEXT_HEADS * head_size, num_heads=2, mlp_ratio=2, patch_size=14, spatial_merge_size=2
        ),
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
    )
    _save_model(Qwen2VLForConditionalGeneration(config), tokenizer, out)
    tokenizer.save_pretrained(out)
    # The processor config is written as the published model ships it, rather than by
    # Qwen2VLProcessor.save_pretrained: its video processor cannot be built without torchvision,
    # and the directory must be the same in both environments.
    write_qwen2_vl_processor(out, {"size": QWEN2_VL_PIXELS, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2})
    return out


def write_qwen2_vl_processor(out: Path, vision: dict) -> None:
    """Qwen2-VL's processor config, with ``vision`` for its image and video processors, and its chat template."""
    processor_config = {
        "processor_class": "Qwen2VLProcessor",
        "image_processor": {"image_processor_type": "Qwen2VLImageProcessor", **vision},
        "video_processor": {"video_processor_type": "Qwen2VLVideoProcessor", **vision},
    }
    (out / "processor_config.json").write_text(json.dumps(processor_config, indent=2))
    (out / "chat_template.jinja").write_text(QWEN2_VL_TEMPLATE)


def build_llava(out: Path, head_size: int = HEAD_SIZE) -> Path:
    """LLaVA, images: a two-layer CLIP vision tower (56 px, patch 14) and a Llama text model."""
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    config = LlavaConfig(
        vision_config=dict(
            model_type="clip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=LLAVA_IMAGE_SIZE,
            patch_size=LLAVA_PATCH,
            projection_dim=32,
        ),
        text_config=dict(model_type="llama", **_text_config(tokenizer, head_size)),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(LLAVA_IMAGE_SIZE // LLAVA_PATCH) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    _save_model(LlavaForConditionalGeneration(config), tokenizer, out)
    _published_weight_names(out / "model.safetensors", "vision_tower.", "vision_tower.vision_model.")
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": LLAVA_IMAGE_SIZE}, crop_size={"height": LLAVA_IMAGE_SIZE, "width": LLAVA_IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=LLAVA_PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_TEMPLATE,
    )
    processor.save_pretrained(out)
    return out


def build_qwen2_audio(out: Path, head_size: int = HEAD_SIZE) -> Path:
    """Qwen2-Audio, audio: a one-layer Whisper-style encoder over 128 mel bins, and a Qwen2 text model."""
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    config = Qwen2AudioConfig(
        audio_config=dict(
            d_model=32,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            num_mel_bins=128,
            max_source_positions=1500,
        ),
        text_config=_text_config(tokenizer, head_size),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    _save_model(Qwen2AudioForConditionalGeneration(config), tokenizer, out)
    _published_weight_names(out / "model.safetensors", "language_model.model.model.", "language_model.model.")
    # No chat_template given: the processor's own default (ChatML with "Audio N:" parts) is used.
    Qwen2AudioProcessor(WhisperFeatureExtractor(feature_size=128), tokenizer).save_pretrained(out)
    return out


def _published_weight_names(weights: Path, saved: str, published: str) -> None:
    """transformers 5 saves some models' weights under other names than their published
    checkpoints use; it loads both, vLLM only the published ones."""
    state = load_file(weights)
    save_file({name.replace(saved, published, 1): tensor for name, tensor in state.items()}, weights, metadata={"format": "pt"})
