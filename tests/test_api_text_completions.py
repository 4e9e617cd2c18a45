"""POST /v1/completions, driven by the official `openai` client (``client.completions.create``)
against a real server on the real default model, on llama.cpp and on transformers."""

from __future__ import annotations

import time

import openai
import pytest
from fastapi import FastAPI

from api import add_api
from engines import ChatModel, ChatRequest, LoadedModels
from harness.running_server import running_server

PROMPT = "The three primary colors are"
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
GREEDY = {"temperature": 0, "max_tokens": 12}


@pytest.fixture(scope="module", params=["llamacpp", "huggingface"])
def served(request, loaded_models):
    """(ChatModel, client, model id) for each backend; transformers' is the session's model."""
    if request.param == "huggingface":
        loaded_models, owned = loaded_models, None
    else:
        owned = ChatModel({"infer_backend": "llamacpp"})
        loaded_models = LoadedModels(owned)
    try:
        with running_server(add_api(FastAPI(), loaded_models)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
            yield loaded_models.model, client, loaded_models.model.model_id
    finally:
        if owned is not None:
            owned.close()


def test_the_prompt_is_continued_as_it_is(served):
    model, client, model_id = served
    completion = client.completions.create(model=model_id, prompt=PROMPT, **GREEDY)
    [choice] = completion.choices
    [direct] = model.chat(ChatRequest.completion(PROMPT, temperature=0, max_new_tokens=12))
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert choice.text == direct.response_text and choice.text.strip()
    # The prompt's own tokens, with no chat template around them.
    assert completion.usage.prompt_tokens == len(model.engine.tokenizer(PROMPT).input_ids)
    assert completion.usage.completion_tokens == direct.response_length
    assert choice.finish_reason == direct.finish_reason


def test_token_ids_are_the_same_prompt(served):
    model, client, model_id = served
    ids = model.engine.tokenizer(PROMPT).input_ids
    by_text = client.completions.create(model=model_id, prompt=PROMPT, **GREEDY)
    by_ids = client.completions.create(model=model_id, prompt=ids, **GREEDY)
    assert by_ids.choices[0].text == by_text.choices[0].text
    echoed = client.completions.create(model=model_id, prompt=[ids], echo=True, **GREEDY)
    assert echoed.choices[0].text == PROMPT + by_text.choices[0].text


def test_stream_matches_the_whole_completion(served):
    _, client, model_id = served
    whole = client.completions.create(model=model_id, prompt=PROMPT, **GREEDY)
    text, finish, usage = "", None, None
    for chunk in client.completions.create(model=model_id, prompt=PROMPT, stream=True, stream_options={"include_usage": True}, **GREEDY):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.text
            finish = choice.finish_reason or finish
    assert text == whole.choices[0].text
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_defaults_to_16_tokens_as_openai(served):
    _, client, model_id = served
    completion = client.completions.create(model=model_id, prompt=COUNTING, temperature=0)
    assert completion.usage.completion_tokens == 16 and completion.choices[0].finish_reason == "length"


def test_echo_and_stop(served):
    _, client, model_id = served
    free = client.completions.create(model=model_id, prompt=COUNTING, **GREEDY).choices[0].text
    assert " 12," in free, free
    stopped = client.completions.create(model=model_id, prompt=COUNTING, stop=[" 12,"], echo=True, **GREEDY).choices[0]
    assert stopped.text == COUNTING + free[: free.index(" 12,")]
    assert stopped.finish_reason == "stop"
    streamed = "".join(choice.text for chunk in client.completions.create(
        model=model_id, prompt=COUNTING, stop=[" 12,"], echo=True, stream=True, **GREEDY) for choice in chunk.choices)
    assert streamed == stopped.text


def test_n_sampled_replies_streamed_side_by_side(served):
    _, client, model_id = served
    settings = {"model": model_id, "prompt": PROMPT, "n": 3, "temperature": 1.0, "seed": 7, "max_tokens": 8}
    whole = client.completions.create(**settings)
    assert [choice.index for choice in whole.choices] == [0, 1, 2]
    assert all(choice.text for choice in whole.choices)
    assert len({choice.text for choice in whole.choices}) > 1, "three sampled replies came out the same"
    texts, finished = {}, set()
    for chunk in client.completions.create(**settings, stream=True):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1, 2} and all(texts.values())


def test_several_prompts_in_one_request(served):
    """Choice i of prompt p is choice p * n + i, each prompt continued as it is alone."""
    _, client, model_id = served
    prompts = [PROMPT, COUNTING]
    alone = [client.completions.create(model=model_id, prompt=prompt, **GREEDY).choices[0].text for prompt in prompts]
    together = client.completions.create(model=model_id, prompt=prompts, n=2, echo=True, **GREEDY)
    assert [choice.index for choice in together.choices] == [0, 1, 2, 3]
    assert [choice.text for choice in together.choices] == [prompt + text for prompt, text in zip(prompts, alone) for _ in range(2)]
    texts = {}
    for chunk in client.completions.create(model=model_id, prompt=prompts, n=2, echo=True, stream=True, **GREEDY):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert [texts[index] for index in range(4)] == [choice.text for choice in together.choices]


def test_legacy_logprobs(served):
    _, client, model_id = served
    completion = client.completions.create(model=model_id, prompt=PROMPT, logprobs=3, **GREEDY)
    [choice] = completion.choices
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == completion.usage.completion_tokens
    assert "".join(logprobs.tokens).startswith(choice.text)
    assert logprobs.text_offset == [sum(map(len, logprobs.tokens[:i])) for i in range(len(logprobs.tokens))]
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert 1 <= len(top) <= 3 and logprob <= 0
        assert logprob == pytest.approx(max(top.values()), abs=1e-4) and top.get(token) == pytest.approx(logprob, abs=1e-4)
    streamed = [token for chunk in client.completions.create(model=model_id, prompt=PROMPT, logprobs=3, stream=True, **GREEDY)
                for choice in chunk.choices if choice.logprobs for token in choice.logprobs.tokens]
    assert streamed == logprobs.tokens


@pytest.mark.parametrize(("settings", "message"), [
    ({"suffix": " and that is all."}, "suffix is not supported"),
    ({"echo": True, "logprobs": 1}, "echo with logprobs"),
    ({"logprobs": 21}, "logprobs"),
    ({"prompt": ["one", "two", "three"], "n": 6}, "ask for 18 replies; one request may ask for at most 16"),
    ({"prompt": [10**9]}, "token ids this model does not have"),
    ({"prompt": ""}, "prompt is empty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"best_of": 3}, "best_of"),
    ({"frobnicate": 1}, "unrecognized parameter 'frobnicate'"),
])
def test_what_cannot_be_done_is_a_400_naming_it(served, settings, message):
    _, client, model_id = served
    body = {"model": model_id, "prompt": PROMPT, **settings}
    extra = {name: body.pop(name) for name in list(body) if name == "frobnicate"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(**body, extra_body=extra)
    assert message in refused.value.body["message"]


def test_a_client_leaving_mid_stream_stops_the_generation(served):
    model, client, model_id = served
    stream = client.completions.create(model=model_id, prompt=COUNTING, temperature=0, max_tokens=3000, stream=True)
    received = ""
    for chunk in stream:
        received += chunk.choices[0].text if chunk.choices else ""
        if len(received) > 10:
            break
    busy = model.engine.unfinished_requests()
    stream.close()
    assert len(received) > 10, f"the reply ended before the client left: {received!r}"
    assert busy == 1, "the model was not writing the reply when the client left"
    # 3,000 tokens take over 40 s here on either backend; the model stops at its next step.
    deadline = time.monotonic() + 15
    while model.engine.unfinished_requests() or model.line.running:
        assert time.monotonic() < deadline, "the generation went on after the client left"
        time.sleep(0.1)
    started = time.monotonic()
    client.completions.create(model=model_id, prompt=PROMPT, temperature=0, max_tokens=1)
    assert time.monotonic() - started < 30


def test_keys_and_the_body_limit_hold_as_for_chat(loaded_models):
    with running_server(add_api(FastAPI(), loaded_models, api_key="the-key", max_request_size=2048)) as url:
        keyless = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0, timeout=300)
        with pytest.raises(openai.AuthenticationError):
            keyless.completions.create(model=loaded_models.model.model_id, prompt=PROMPT, max_tokens=2)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="the-key", max_retries=0, timeout=300)
        with pytest.raises(openai.APIStatusError) as refused:
            client.completions.create(model=loaded_models.model.model_id, prompt="Why? " * 500, max_tokens=2)
        assert refused.value.status_code == 413 and "--max-request-size" in refused.value.body["message"]
        assert client.completions.create(model=loaded_models.model.model_id, prompt=PROMPT, max_tokens=2).choices[0].text
