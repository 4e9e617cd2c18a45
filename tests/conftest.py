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
    with ChatModel() as model:
        yield model


@pytest.fixture(scope="session")
def default_model_dir(chat_model):
    """The converted safetensors directory of the embedded model."""
    return chat_model.engine.model_path
