"""The OpenAI-compatible API, driven by the official `openai` client against a real server on
localhost serving the real default model (greedy decoding, so replies are reproducible)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import FastAPI

import server
from api import add_api
from engines import LoadedModels
from harness.running_server import running_server
from tests.api_samples import COUNTING, PNG, QUESTION, WEATHER_TOOL, image_part, stream_text
from tests.held_load import load_held

API_KEY = "test-key"
GREEDY = {"temperature": 0, "max_tokens": 24}
LONG_STORY = [{"role": "user", "content": "Write a long story about a dragon."}]


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("allowed-media")


@pytest.fixture(scope="module")
def base_url(loaded_models, media_dir):
    with running_server(add_api(FastAPI(), loaded_models, api_key=API_KEY, local_media_dir=media_dir)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


# ---- completions


def test_models_lists_the_loaded_model(client, loaded_models):
    [card] = client.models.list().data
    # A plain name clients can type: no spaces or brackets.
    assert card.id == loaded_models.model.model_id == "SmolLM2-135M-Instruct"
    # What it reads and its context, for a client to know before it sends (another anychat's remote backend reads them).
    assert (card.input_modalities, card.max_model_len) == (["text"], loaded_models.model.context_length) and card.max_model_len


async def test_the_model_list_is_answered_while_every_worker_thread_is_taken():
    """The page's synchronous handlers share the server's worker threads (40); a flood of them
    took /v1/models to 15 s. Listing models needs none of those threads."""
    import anyio.to_thread

    app = add_api(FastAPI(), LoadedModels())
    limiter = anyio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        await limiter.acquire_on_behalf_of(holder)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://server") as http:
            listed = await asyncio.wait_for(http.get("/v1/models"), 10)
    finally:
        for holder in holders:
            limiter.release_on_behalf_of(holder)
    assert listed.status_code == 200 and listed.json()["data"] == [], listed.text


def test_completion_is_the_models_reply_with_its_token_counts(client, model_id, loaded_models):
    completion = client.chat.completions.create(model=model_id, messages=QUESTION, **GREEDY)
    [reply] = loaded_models.model.chat(QUESTION, temperature=0, max_new_tokens=24)
    [choice] = completion.choices
    assert choice.message.content == reply.response_text and "Paris" in reply.response_text
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    tokenizer = loaded_models.model.engine.tokenizer
    prompt_ids = tokenizer(loaded_models.model.render_prompt(QUESTION), add_special_tokens=False).input_ids
    assert completion.usage.prompt_tokens == len(prompt_ids) == reply.prompt_length
    # The reply's tokens and the end-of-turn token that ended it.
    assert completion.usage.completion_tokens == len(tokenizer(reply.response_text, add_special_tokens=False).input_ids) + 1
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_stream_matches_the_whole_completion(client, model_id):
    whole = client.chat.completions.create(model=model_id, messages=QUESTION, **GREEDY)
    chunks = list(client.chat.completions.create(
        model=model_id, messages=QUESTION, stream=True, stream_options={"include_usage": True}, **GREEDY
    ))
    text, finish, usage = stream_text(chunks)
    assert text == {0: whole.choices[0].message.content}
    assert finish == {0: "stop"}
    assert usage.model_dump() == whole.usage.model_dump()
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3, "the reply came in one piece"


def test_usage_only_when_asked_in_a_stream(client, model_id):
    chunks = list(client.chat.completions.create(model=model_id, messages=QUESTION, stream=True, **GREEDY))
    assert all(chunk.usage is None for chunk in chunks)


def test_max_tokens_cuts_with_finish_reason_length(client, model_id):
    completion = client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3
    chunks = client.chat.completions.create(
        model=model_id, messages=QUESTION, temperature=0, max_completion_tokens=3, stream=True, stream_options={"include_usage": True}
    )
    text, finish, usage = stream_text(chunks)
    assert finish == {0: "length"} and usage.completion_tokens == 3
    assert text[0] == completion.choices[0].message.content


def test_continue_final_message_goes_on_with_the_prefilled_reply(client, model_id):
    """vLLM's extra body fields, as agent frameworks send them to prefill the assistant turn: the
    reply continues the last assistant message, so (greedy) the two parts are the whole reply."""
    whole = client.chat.completions.create(model=model_id, messages=LONG_STORY, temperature=0, max_tokens=12).choices[0].message.content
    head = client.chat.completions.create(model=model_id, messages=LONG_STORY, temperature=0, max_tokens=6).choices[0].message.content
    continued = {"model": model_id, "messages": [*LONG_STORY, {"role": "assistant", "content": head}], "temperature": 0, "max_tokens": 6,
                 "extra_body": {"continue_final_message": True, "add_generation_prompt": False}}
    completion = client.chat.completions.create(**continued)
    assert head + completion.choices[0].message.content == whole
    assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 6
    text, finish, _ = stream_text(client.chat.completions.create(stream=True, **continued))
    assert text == {0: completion.choices[0].message.content} and finish == {0: "length"}


def test_stop_string_ends_the_reply_before_it(client, model_id):
    free = client.chat.completions.create(model=model_id, messages=QUESTION, **GREEDY).choices[0].message.content
    stop = "Paris"
    expected = free[: free.index(stop)]
    completion = client.chat.completions.create(model=model_id, messages=QUESTION, stop=[stop], **GREEDY)
    assert completion.choices[0].message.content == expected
    assert completion.choices[0].finish_reason == "stop"
    text, finish, _ = stream_text(client.chat.completions.create(model=model_id, messages=QUESTION, stop=stop, stream=True, **GREEDY))
    assert text == {0: expected} and finish == {0: "stop"}


@pytest.mark.slow
def test_n_2_gives_two_sampled_replies(client, model_id):
    story = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    sampled = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 12, "seed": 7}
    completion = client.chat.completions.create(model=model_id, messages=story, n=2, **sampled)
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert [choice.finish_reason for choice in completion.choices] == ["length", "length"]
    first, second = (choice.message.content for choice in completion.choices)
    assert first and second and first != second
    assert completion.usage.completion_tokens == 2 * 12
    again = client.chat.completions.create(model=model_id, messages=story, n=2, **sampled)
    assert [c.message.content for c in again.choices] == [first, second], "the seed was not honoured"
    text, finish, usage = stream_text(client.chat.completions.create(
        model=model_id, messages=story, n=2, stream=True, stream_options={"include_usage": True}, **sampled
    ))
    assert finish == {0: "length", 1: "length"}
    assert text[0] and text[1] and text[0] != text[1]
    assert usage.completion_tokens == 2 * 12


# ---- tools


@pytest.mark.slow
def test_tool_call_round_trip(client, model_id, loaded_models):
    """Earlier turns in which the assistant called the tool make this small model call it again
    (greedy), so the reply is a tool call we know; then its result goes back to the model."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    question = {"role": "user", "content": "What is the weather in Paris?"}
    earlier = [question, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
               {"role": "assistant", "content": "It is 18 C and sunny in Paris."}] * 2
    completion = client.chat.completions.create(model=model_id, messages=[*earlier, question], tools=[WEATHER_TOOL], temperature=0, max_tokens=40)
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [tool_call] = choice.message.tool_calls
    assert tool_call.function.name == "get_weather" and json.loads(tool_call.function.arguments) == {"city": "Paris"}
    assert tool_call.id.startswith("call_")

    chunks = list(client.chat.completions.create(model=model_id, messages=[*earlier, question], tools=[WEATHER_TOOL], temperature=0, max_tokens=40, stream=True))
    streamed_calls = [call for chunk in chunks for choice in chunk.choices for call in choice.delta.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed_calls] == [("get_weather", {"city": "Paris"})]
    assert not "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    answer = client.chat.completions.create(
        model=model_id,
        messages=[*earlier, question, choice.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": tool_call.id, "content": "25 C and cloudy"}],
        tools=[WEATHER_TOOL], temperature=0, max_tokens=40,
    ).choices[0]
    assert answer.finish_reason == "stop" and answer.message.tool_calls is None
    assert "25 C" in answer.message.content, "the tool's result did not reach the model"


def test_tool_choice_none_gives_text(client, model_id):
    completion = client.chat.completions.create(model=model_id, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice="none", **GREEDY)
    plain = client.chat.completions.create(model=model_id, messages=QUESTION, **GREEDY)
    assert completion.choices[0].message.content == plain.choices[0].message.content


def test_reasoning_comes_back_separately(client, model_id):
    """Earlier turns that thought inside <think> make the model do it again (greedy)."""
    question = {"role": "user", "content": "Hi there!"}
    earlier = [question, {"role": "assistant", "content": "<think>The user greets me.</think>Hello! How can I help?"}] * 2
    request = {"model": model_id, "messages": [*earlier, question], "temperature": 0, "max_tokens": 30}
    message = client.chat.completions.create(**request).choices[0].message
    assert message.reasoning_content == "The user greets me."
    assert message.content == "Hello! How can I help?"
    chunks = list(client.chat.completions.create(**request, stream=True))
    deltas = [choice.delta for chunk in chunks for choice in chunk.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == message.reasoning_content
    assert "".join(d.content or "" for d in deltas) == message.content


def test_logprobs_in_openais_shape_streamed_and_not(client, model_id):
    settings = {"model": model_id, "messages": QUESTION, "temperature": 0, "max_tokens": 12, "logprobs": True, "top_logprobs": 3}
    whole = client.chat.completions.create(**settings)
    [choice] = whole.choices
    tokens = choice.logprobs.content
    assert len(tokens) == whole.usage.completion_tokens
    assert "".join(token.token for token in tokens).startswith(choice.message.content)
    for token in tokens:
        assert len(token.top_logprobs) == 3 and token.logprob == token.top_logprobs[0].logprob <= 0
        assert bytes(token.bytes).decode() == token.token
    streamed = [token for chunk in client.chat.completions.create(**settings, stream=True)
                for choice in chunk.choices if choice.logprobs for token in choice.logprobs.content]
    assert [(t.token, t.top_logprobs[1].token) for t in streamed] == [(t.token, t.top_logprobs[1].token) for t in tokens]
    plain = client.chat.completions.create(**{**settings, "logprobs": False, "top_logprobs": None})
    assert plain.choices[0].logprobs is None


# ---- cancelling


def test_disconnect_cancels_the_generation(base_url, client, model_id, loaded_models):
    engine = loaded_models.model.engine
    forward_calls = []
    hook = engine.model.register_forward_hook(lambda *args: forward_calls.append(time.monotonic()))
    try:
        stream = client.chat.completions.create(model=model_id, messages=COUNTING, temperature=0, max_tokens=3000, stream=True)
        received = ""
        for chunk in stream:
            received += chunk.choices[0].delta.content or ""
            if len(received) > 10:
                break
        assert received.startswith("1, 2, 3"), "a reply of thousands of tokens was expected"
        stream.close()
        left = time.monotonic()
        deadline = left + 60
        while engine.line.running:
            assert time.monotonic() < deadline, "the generation went on after the client left"
            time.sleep(0.1)
        calls_when_freed = len(forward_calls)
        assert calls_when_freed < 1000, f"{calls_when_freed} tokens generated of 3000: not cancelled"
        time.sleep(1)
        assert len(forward_calls) == calls_when_freed, "the model is still generating"
    finally:
        hook.remove()
    started = time.monotonic()
    client.chat.completions.create(model=model_id, messages=QUESTION, temperature=0, max_tokens=1)
    assert time.monotonic() - started < 30


# ---- refusals


def test_wrong_or_missing_api_key_is_401(base_url, model_id):
    for key in ("wrong-key", ""):
        wrong = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key or "unused", max_retries=0)
        if not key:
            wrong = wrong.with_options(default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as refused:
            wrong.chat.completions.create(model=model_id, messages=QUESTION)
        assert refused.value.status_code == 401
        assert "API key" in refused.value.body["message"]
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"messages": QUESTION}, 400, "missing required parameter 'model'"),
        ({"model": "MODEL", "messages": []}, 400, "messages"),
        ({"model": "MODEL", "messages": QUESTION, "temperature": 5}, 400, "temperature"),
        ({"model": "MODEL", "messages": QUESTION, "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "MODEL", "messages": QUESTION, "frobnicate": 1}, 400, "unrecognized parameter 'frobnicate'"),
        ({"model": "MODEL", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
        ({"model": "MODEL", "messages": [{"role": "assistant", "content": "hi"}]}, 400, "last message must come from the user"),
        ({"model": "no-such-model", "messages": QUESTION}, 404, "is not served here"),
        ({"model": "MODEL", "messages": QUESTION, "presence_penalty": 0.5}, 400, "presence_penalty is not supported by the huggingface engine"),
        ({"model": "MODEL", "messages": QUESTION, "frequency_penalty": 1}, 400, "frequency_penalty is not supported"),
        ({"model": "MODEL", "messages": QUESTION, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
        ({"model": "MODEL", "messages": QUESTION, "top_logprobs": 2}, 400, "top_logprobs needs logprobs: true"),
        ({"model": "MODEL", "messages": QUESTION, "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}}, 400, "not among the tools"),
        ({"model": "MODEL", "messages": QUESTION, "stream_options": {"include_usage": True}}, 400, "only allowed when stream is true"),
        ({"model": "MODEL", "messages": QUESTION, "stream": True, "stop": [""]}, 400, "stop must be non-empty"),
        ({"model": "MODEL", "messages": QUESTION, "continue_final_message": True}, 400, "must be an assistant reply, not 'user'"),
        ({"model": "MODEL", "messages": [*QUESTION, {"role": "assistant", "content": "Paris"}], "continue_final_message": True,
          "add_generation_prompt": True}, 400, "cannot both be true"),
        ({"model": "MODEL", "messages": QUESTION, "add_generation_prompt": False}, 400, "set continue_final_message"),
        ({"model": "MODEL", "messages": [*QUESTION, {"role": "assistant", "content": "{"}], "continue_final_message": True,
          "response_format": {"type": "json_object"}}, 400, "A reply format"),
    ],
)
def test_bad_requests_get_openai_errors(base_url, model_id, body, status, message):
    if isinstance(body, dict):
        body = json.dumps({k: model_id if v == "MODEL" else v for k, v in body.items()}).encode()
    response = httpx.post(f"{base_url}/v1/chat/completions", content=body, headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert set(error) == {"message", "type", "param", "code"}


def test_unknown_endpoint_gets_an_openai_404(base_url):
    response = httpx.get(f"{base_url}/v1/completion", headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 404
    assert "POST /v1/chat/completions" in response.json()["error"]["message"]


def test_a_body_over_the_size_limit_gets_413(loaded_models, model_id):
    limit = 2048
    long_question = [{"role": "user", "content": "Why? " * 500}]
    with running_server(add_api(FastAPI(), loaded_models, max_request_size=limit)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model=model_id, messages=long_question, max_tokens=2)
        assert refused.value.status_code == 413
        error = refused.value.body
        assert error["code"] == "request_too_large" and set(error) == {"message", "type", "param", "code"}
        assert re.search(r"the request body is 2.\d KB, over this server's limit of 2 KB \(set with --max-request-size\)", error["message"])

        # Sent without a Content-Length: counted as it arrives, and refused once over.
        body = json.dumps({"model": model_id, "messages": long_question, "max_tokens": 2}).encode()
        chunked = httpx.post(f"{url}/v1/chat/completions", content=iter([body[:1000], body[1000:2000], body[2000:]]),
                             headers={"Content-Type": "application/json"}, timeout=60)
        assert "content-length" not in chunked.request.headers
        assert chunked.status_code == 413 and "the request body is over this server's limit of 2 KB (set with --max-request-size)" in chunked.json()["error"]["message"]

        assert client.chat.completions.create(model=model_id, messages=QUESTION, max_tokens=2).choices[0].message.content


def test_penalty_0_is_no_penalty(client, model_id):
    completion = client.chat.completions.create(model=model_id, messages=QUESTION, presence_penalty=0, frequency_penalty=0, **GREEDY)
    assert completion.choices[0].message.content == client.chat.completions.create(model=model_id, messages=QUESTION, **GREEDY).choices[0].message.content


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/latest/meta-data/", "remote URLs are not fetched"),
        ("https://example.com/cat.png", "remote URLs are not fetched"),
        ("file:///etc/passwd", "outside the folder this server may read"),
        ("data:image/png;base64,@@@", "not valid base64"),
        ("ftp://example.com/cat.png", "unsupported URL scheme"),
        (f"data:image/png;base64,{PNG}", "This model does not accept images"),
    ],
)
def test_media_parts_refused_with_a_reason(client, model_id, url, message):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model_id, messages=[image_part(url)], max_tokens=2)
    assert message in refused.value.body["message"]
    if "does not accept" not in message:  # that one is the engine's refusal, not about a part
        assert refused.value.body["param"] == "messages[0].content[1]"


def test_local_files_need_the_allowed_folder(base_url, loaded_models, model_id, media_dir):
    picture = media_dir / "pixel.png"
    picture.write_bytes(base64.b64decode(PNG))
    with pytest.raises(openai.BadRequestError) as refused:
        openai.OpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0).chat.completions.create(
            model=model_id, messages=[image_part(picture.as_uri())], max_tokens=2
        )
    # The file was allowed and read; the text-only model is what refuses it.
    assert "This model does not accept images" in refused.value.body["message"]
    with running_server(add_api(FastAPI(), loaded_models)) as no_files_url:
        with pytest.raises(openai.BadRequestError) as refused:
            openai.OpenAI(base_url=f"{no_files_url}/v1", api_key="none", max_retries=0).chat.completions.create(
                model=model_id, messages=[image_part(picture.as_uri())], max_tokens=2
            )
    assert "--allowed-local-media-path" in refused.value.body["message"]


# ---- scores


def test_scores_from_a_generative_model_are_refused(base_url, model_id):
    response = httpx.post(f"{base_url}/v1/score", json={"model": model_id, "input": ["a", "b"]}, headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 400
    assert "does not produce scores" in response.json()["error"]["message"]


def test_scores_of_a_reward_model(reward_model_dir):
    reward_models = LoadedModels()
    reward_models.load({"model_name_or_path": str(reward_model_dir)})
    try:
        texts = ["The sky is blue.", "Blue is the sky, and the grass is green."]
        expected = reward_models.model.get_scores(texts)
        with running_server(add_api(FastAPI(), reward_models)) as url:
            model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
            response = httpx.post(f"{url}/v1/score", json={"model": model, "input": texts}, timeout=60)
            single = httpx.post(f"{url}/v1/score", json={"model": model, "input": texts[1]}, timeout=60)
            chat = httpx.post(f"{url}/v1/chat/completions", json={"model": model, "messages": QUESTION}, timeout=60)
    finally:
        reward_models.unload()
    assert response.status_code == 200, response.text
    assert [item["index"] for item in response.json()["data"]] == [0, 1]
    assert [item["score"] for item in response.json()["data"]] == pytest.approx(expected)
    assert expected[0] != pytest.approx(expected[1])
    assert single.json()["data"][0]["score"] == pytest.approx(expected[1])
    assert chat.status_code == 400 and "reward model" in chat.json()["error"]["message"]


# ---- the page and the API in one process


@pytest.mark.browser
@pytest.mark.server
def test_page_and_api_at_once_on_one_model(tmp_path):
    """`python app.py` serves the page and /v1 from one LoadedModels: both answer at the same time,
    and what the page does to the model (unload, load) is what the API serves."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from harness.browser import CHROMIUM, CHROMIUM_ARGS, AppProcess

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    app = AppProcess(tmp_path)
    try:
        client = openai.OpenAI(base_url=f"{app.url}v1", api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            sync_api.expect.set_options(timeout=120_000)
            page = browser.new_page()
            page.goto(app.url)
            box = page.locator("#chat-input textarea")
            sync_api.expect(box).to_have_attribute("placeholder", re.compile("reads text only"))
            # A short reply: the small model sometimes rambles on to its 1,024-token default.
            page.get_by_role("tab", name="Settings").click()
            page.locator("#max-new-tokens input[type=number]").fill("24")
            page.locator("#max-new-tokens input[type=number]").press("Enter")
            page.get_by_role("tab", name="Chat").click()

            api_result = {}
            api_started = threading.Event()

            def use_the_api():
                chunks = client.chat.completions.create(model=model, messages=COUNTING, temperature=0, max_tokens=30, stream=True)
                api_result["stream"] = stream_text(_signal_first(chunks, api_started))

            api_thread = threading.Thread(target=use_the_api)
            api_thread.start()
            assert api_started.wait(120), "the API stream did not start"
            box.fill("What is the capital of France?")
            box.press("Enter")
            # The reply (the stats line under it, once it is finished, is a message of its own).
            sync_api.expect(page.locator("#chatbot [data-testid=bot]").first).to_be_visible()
            api_thread.join(300)
            sync_api.expect(page.locator("#stop-btn")).to_be_hidden()  # the page's reply is finished
            text, finish, _ = api_result["stream"]
            assert text[0].startswith("1, 2, 3") and finish == {0: "length"}
            page_reply = page.locator("#chatbot [data-testid=bot]").first.inner_text()
            assert page_reply.strip() and "error" not in page_reply.lower()

            page.get_by_role("tab", name="Settings").click()
            page.locator("#unload-btn").click()
            sync_api.expect(page.locator("#model-status")).to_contain_text("No model loaded.")
            assert client.models.list().data == []
            with pytest.raises(openai.InternalServerError) as refused:
                client.chat.completions.create(model=model, messages=QUESTION, max_tokens=2)
            assert refused.value.status_code == 503 and "No model is loaded" in refused.value.body["message"]

            page.locator("#load-btn").click()
            sync_api.expect(page.locator("#model-status")).to_contain_text("Loaded SmolLM2-135M-Instruct (embedded) on ")
            assert [card.id for card in client.models.list().data] == [model]
            assert client.chat.completions.create(model=model, messages=QUESTION, max_tokens=2).choices[0].message.content

            # Told to stop with the page open (its heartbeat stream) and a long reply streaming,
            # the server stops within seconds rather than waiting for them.
            long_reply = client.chat.completions.create(model=model, messages=COUNTING, temperature=0, max_tokens=3000, stream=True)
            next(iter(long_reply))
            told = time.monotonic()
            app.process.terminate()
            app.process.wait(timeout=60)
            assert time.monotonic() - told < server.GRACEFUL_SHUTDOWN_SECONDS + 5, app.log()
            browser.close()
    finally:
        app.stop()


def _signal_first(chunks, started: threading.Event):
    for chunk in chunks:
        started.set()
        yield chunk


# ---- media parts reaching multimodal models (tiny random-weight models of real architectures)


@contextmanager
def serving_model(path: Path) -> Iterator[tuple[LoadedModels, openai.OpenAI, str]]:
    media_models = LoadedModels()
    media_models.load({"model_name_or_path": str(path)})
    try:
        with running_server(add_api(FastAPI(), media_models)) as url:
            media_client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
            yield media_models, media_client, media_client.models.list().data[0].id
    finally:
        media_models.unload()


def recording_generate(monkeypatch, media_models: LoadedModels) -> list[dict]:
    """What the model's generate receives, call by call."""
    calls, engine = [], media_models.model.engine
    original = engine.model.generate

    def generate(**inputs):
        calls.append(inputs)
        return original(**inputs)

    monkeypatch.setattr(engine.model, "generate", generate)
    return calls


def test_an_image_part_reaches_a_multimodal_model(tmp_path, monkeypatch):
    from media_samples import png_bytes, solid_image
    from harness.tiny_models import build_qwen2_vl

    with serving_model(build_qwen2_vl(tmp_path / "qwen2_vl")) as (media_models, media_client, model):
        calls = recording_generate(monkeypatch, media_models)
        data_url = "data:image/png;base64," + base64.b64encode(png_bytes(solid_image((255, 0, 0), (80, 60)))).decode()
        completion = media_client.chat.completions.create(
            model=model, temperature=0, max_tokens=3,
            messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": data_url}}]}],
        )
        processor = media_models.model.engine.prompts.media.processor
        [inputs] = calls
        # 80x60 becomes 84x56: 6x4 patches of 14, merged 2x2 into 6 image tokens, after the text.
        prompt = media_models.model.engine.tokenizer.decode(inputs["input_ids"][0])
        assert "What is this?<|vision_start|><|image_pad|>" in prompt
        assert int((inputs["input_ids"] == processor.image_token_id).sum()) == 6
        assert inputs["image_grid_thw"].tolist() == [[1, 4, 6]]
        assert completion.usage.prompt_tokens == inputs["input_ids"].shape[1]
        assert completion.usage.completion_tokens == 3 and completion.choices[0].finish_reason == "length"


def test_an_input_audio_part_reaches_an_audio_model(tmp_path, monkeypatch):
    from media_samples import tone, write_audio
    from harness.tiny_models import build_qwen2_audio

    wav = write_audio(tmp_path / "tone.wav", tone(1.0, 16000), 16000).read_bytes()
    with serving_model(build_qwen2_audio(tmp_path / "qwen2_audio")) as (media_models, media_client, model):
        calls = recording_generate(monkeypatch, media_models)
        chunks = list(media_client.chat.completions.create(
            model=model, temperature=0, max_tokens=3, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}},
                {"type": "text", "text": "What is this sound?"},
            ]}],
        ))
        [inputs] = calls
        # Whisper features: 100 frames a second, two stride-2 steps: 1 s -> 25 audio tokens.
        assert inputs["feature_attention_mask"].sum(-1).tolist() == [100]
        assert int((inputs["input_ids"] == media_models.model.engine.prompts.media.processor.audio_token_id).sum()) == 25
        _, finish, usage = stream_text(chunks)
        assert finish == {0: "length"} and usage.prompt_tokens == inputs["input_ids"].shape[1]


# ---- while a model loads


def test_a_request_while_a_model_loads_is_told_to_retry_and_then_answered():
    loaded_models = LoadedModels()
    body = {"model": "SmolLM2-135M-Instruct", "messages": QUESTION, "max_tokens": 2}
    with running_server(add_api(FastAPI(), loaded_models)) as url:
        with load_held(loaded_models):
            response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert "is loading" in response.json()["error"]["message"]
            assert response.json()["error"]["code"] == "model_loading"
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).status_code == 200
    loaded_models.unload()
