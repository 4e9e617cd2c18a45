"""Shared fixtures. Tests run offline on the real embedded model (SmolLM2-135M-Instruct)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

from engines import ChatModel

GREEDY = {"temperature": 0, "max_new_tokens": 24}


@pytest.fixture(scope="session")
def chat_model():
    """The default model on the HF engine, loaded once for the session (converted on first use)."""
    with ChatModel({"infer_backend": "huggingface"}) as model:
        yield model


@pytest.fixture(scope="session")
def default_model_dir(chat_model):
    """The converted safetensors directory of the embedded model."""
    return chat_model.engine.model_path


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory, default_model_dir):
    """A tiny random reward model (one-label sequence classifier) with the default model's tokenizer.
    Head size 64, as vLLM's CPU attention kernels need."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    path = tmp_path_factory.mktemp("reward")
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id, architectures=["LlamaForSequenceClassification"])
    LlamaForSequenceClassification(config).save_pretrained(path)
    return str(path)
