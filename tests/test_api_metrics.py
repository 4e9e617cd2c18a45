"""GET /metrics in Prometheus' text format, read by prometheus_client's own parser against a real
server on the default model (transformers and llama.cpp): behind the API key, and its numbers
moving with the requests served, by what each reply says of itself."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from api import add_api
from harness.running_server import running_server
from tests.api_samples import QUESTION

pytestmark = pytest.mark.slow

API_KEY = "metrics-key"


@pytest.fixture(scope="module", params=["huggingface", "llamacpp"])
def served(request):
    loaded_models = request.getfixturevalue("loaded_models" if request.param == "huggingface" else "llamacpp_models")
    with running_server(add_api(FastAPI(), loaded_models, api_key=API_KEY)) as url:
        yield url, loaded_models.model


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, by its name and labels."""
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_metrics_are_behind_the_key(served):
    url, _ = served
    refused = httpx.get(f"{url}/metrics")
    assert refused.status_code == 401 and "API key" in refused.json()["error"]["message"]


def test_metrics_move_with_the_requests_served(served):
    url, model = served
    name = model.model_id
    before = scrape(url)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    whole = client.chat.completions.create(model=name, messages=QUESTION, temperature=0, max_tokens=12)
    streamed = list(client.chat.completions.create(model=name, messages=QUESTION, temperature=0, max_tokens=12, stream=True,
                                                   stream_options={"include_usage": True}))
    message = anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0).messages.create(
        model=name, max_tokens=12, messages=QUESTION, extra_body={"temperature": 0})
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="not-served", messages=QUESTION)
    after = scrape(url)

    def moved(metric: str, **labels: str) -> float:
        key = (metric, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("anychat_requests_total", route="/v1/chat/completions", method="POST", status="200") == 2
    assert moved("anychat_requests_total", route="/v1/chat/completions", method="POST", status="404") == 1
    assert moved("anychat_requests_total", route="/v1/messages", method="POST", status="200") == 1
    assert moved("anychat_request_seconds_count", route="/v1/chat/completions", method="POST") == 3
    usage = [whole.usage, streamed[-1].usage]
    prompt = sum(each.prompt_tokens for each in usage) + message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert moved("anychat_replies_total", model=name) == 3
    assert moved("anychat_prompt_tokens_total", model=name) == prompt
    assert moved("anychat_prompt_cached_tokens_total", model=name) == sum(
        each.prompt_tokens_details.cached_tokens for each in usage) + message.usage.cache_read_input_tokens
    assert moved("anychat_generation_tokens_total", model=name) == sum(each.completion_tokens for each in usage) + message.usage.output_tokens
    assert moved("anychat_time_to_first_token_seconds_count", model=name) == 3
    assert moved("anychat_time_to_first_token_seconds_bucket", model=name, le="+Inf") == 3
    assert moved("anychat_time_per_output_token_seconds_count", model=name) == 3
    assert after[("anychat_model_loaded", (("backend", model.backend), ("model", name)))] == 1
    assert after[("anychat_waiting_requests", (("model", name),))] == 0
    assert after[("process_resident_memory_bytes", ())] > 100 * 2**20
    assert after[("anychat_prompt_cache_bytes", (("model", name), ("where", "memory")))] >= 0


def test_each_model_s_memory_is_what_its_backend_holds(served):
    """transformers: its parameters and buffers, as many bytes as their safetensors files hold
    (the model loads in their dtype); llama.cpp: its weights, as many as its GGUF file less its
    header, and the KV cache of every sequence of the context it opened, in f16; each with its
    prompt cache's memory, which a conversation it keeps makes larger by as much."""
    url, model = served

    def memory(sample) -> tuple[float, float]:
        """The model's memory, and its prompt cache's."""
        return (sample[("anychat_model_memory_bytes", (("backend", model.backend), ("model", model.model_id)))],
                sample[("anychat_prompt_cache_bytes", (("model", model.model_id), ("where", "memory")))])

    held, cache = memory(scrape(url))
    # Long enough a prompt for the prompt cache to keep (transformers keeps whole 512-token chunks), and new to it.
    system = f"You answer in one word. {' '.join(f'Rule {index}: be brief.' for index in range(150))} {time.time()}"
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    # The other conversation after it: llama.cpp keeps a conversation aside as another takes its place.
    for messages in ([{"role": "system", "content": system}, *QUESTION], QUESTION):
        client.chat.completions.create(model=model.model_id, messages=messages, temperature=0, max_tokens=4)
    held_after, cache_after = memory(scrape(url))
    assert cache_after > cache and held_after - held == cache_after - cache
    own = held - cache
    engine = model.engine
    if model.backend == "huggingface":
        files = sum(file.stat().st_size for file in Path(engine.model_path).glob("*.safetensors"))
        assert abs(own - files) < 0.001 * files, (own, files)
    else:
        shape = engine.shape
        kv_cache = engine.model.n_ctx() * 2 * shape.layers * shape.kv_heads * shape.head_dim * 2
        gguf = Path(engine.weights_path).stat().st_size
        assert kv_cache > 100 * 2**20 and 0.95 * gguf < own - kv_cache <= gguf, (own, kv_cache, gguf)
