"""Tiny random-weight multimodal models of real architectures, built offline with real processors.

No multimodal weights can be downloaded in CI, so each builder writes a complete model directory
(config, safetensors, tokenizer, processor configs, chat template) of a real architecture with
tiny sizes: the engine loads it exactly as it would load the published model. The replies are
noise; tests assert on what the model receives and on the engine's behaviour.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
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
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None

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
    "The quick brown fox jumps over the lazy dog.",
    "What is in this picture? Describe the image and the video, then listen to the sound.",
    "You are a helpful assistant. Answer the question about the photo in one sentence.",
    "A red square, a blue circle and a green triangle on a white table.",
    "Compare these two images. Which one is brighter? What happens in the clip?",
] * 20

# Written for these fixtures in the shape of the published templates: ChatML with structured
# content parts, each vision part wrapped in the vision start/end tokens the model was trained on.
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

# A plain-text template, like the older LLaVA fine-tunes ship: it knows nothing of content parts,
# so the engine has to write the processor's own image token into the text.
LLAVA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}USER: {{ message['content'] }}\n"
    "{% else %}ASSISTANT: {{ message['content'] }}<|endoftext|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

TEXT_SIZES = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=4096,
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of a few hundred tokens, trained on the fly, with every model's special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )


def _ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    return {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}


def _save(model: torch.nn.Module, processor, out: Path, tokenizer: PreTrainedTokenizerFast) -> Path:
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_qwen2_vl(out: Path) -> Path:
    """Qwen2-VL (images and video): a one-block vision tower, patch 14, merge 2."""
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    ids = _ids(tokenizer)
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
            eos_token_id=tokenizer.eos_token_id,
            **TEXT_SIZES,
        ),
        vision_config=dict(
            depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14, spatial_merge_size=2
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    model = Qwen2VLForConditionalGeneration(config).eval()
    # A small pixel range keeps the token counts (and the test) small: 4 to 16 tokens per image.
    pixels = {"min_pixels": 56 * 56, "max_pixels": 112 * 112}
    image_processor = Qwen2VLImageProcessorPil(**pixels)
    video_processor = _qwen2_vl_video_processor(pixels)
    processor_class = type(
        "Qwen2VLProcessor", (), {}
    ) if video_processor is None else None
    del processor_class
    from transformers import Qwen2VLProcessor

    if video_processor is None:
        # Without torchvision no video processor can be built here; write its config by hand so the
        # directory has the same files as with torchvision (and as the published model).
        processor = _ImageOnlySave(image_processor, tokenizer, QWEN2_VL_TEMPLATE)
        _save(model, processor, out, tokenizer)
        (out / "video_preprocessor_config.json").write_text(json.dumps(_qwen2_vl_video_config(pixels), indent=2))
        (out / "processor_config.json").write_text(json.dumps({"processor_class": Qwen2VLProcessor.__name__}))
        return out
    processor = Qwen2VLProcessor(image_processor, tokenizer, video_processor, chat_template=QWEN2_VL_TEMPLATE)
    return _save(model, processor, out, tokenizer)
