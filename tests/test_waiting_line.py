"""Waiting in line for the model: requests beyond max_concurrent wait in order, see their place
(the page shows it), leave at once when their caller gives up, and beyond max_waiting are
refused (the API answers 503 with Retry-After); users take turns, each with a capped share. On
the real default model with one slot, and the line's own rules without a model."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from fastapi import FastAPI

from api import add_api
from chat.session import ChatSession
from engines import ConfigError, LoadedModels, ModelBusyError, QueuePlace, ReplyChunk
from engines.waiting_line import WaitingLine
from harness.running_server import running_server
from tests.api_samples import COUNTING, QUESTION
from tests.page_input import CONTROLS, message, settings
from webui.handlers import ChatHandlers

MAX_WAITING = 2
ENDLESS = {"temperature": 0, "max_new_tokens": 3000}


@pytest.fixture(scope="module")
def loaded_models():
    loaded_models = LoadedModels()
    loaded_models.load({"infer_backend": "huggingface", "max_concurrent": 1, "max_waiting": MAX_WAITING})
    yield loaded_models
    loaded_models.unload()


async def generating(model):
    """A reply of thousands of tokens, once it is being written: it holds the only slot."""
    stream = model.astream_reply(COUNTING, progress=True, **ENDLESS)
    first = await anext(stream)
    assert isinstance(first, ReplyChunk), f"the first request had to wait: {first}"
    return stream


def wait_until(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


async def test_waiting_requests_see_their_place_move_and_leaving_frees_it_at_once(loaded_models):
    model = loaded_models.model
    running = await generating(model)
    second = model.astream_reply(QUESTION, progress=True, temperature=0, max_new_tokens=8)
    third = model.astream_reply(QUESTION, progress=True, temperature=0, max_new_tokens=8)
    assert await anext(second) == QueuePlace(1)
    assert await anext(third) == QueuePlace(2)
    assert (model.line.running, model.line.waiting) == (1, 2)

    await second.aclose()
    assert model.line.waiting == 1, "a request that left still holds its place"
    assert await anext(third) == QueuePlace(1), "the line moved but the place did not"

    await running.aclose()
    assert await anext(third) == QueuePlace(0)
    rest = [item async for item in third]
    assert rest and all(not isinstance(item, QueuePlace) for item in rest)
    assert "Paris" in rest[-1].parts.content
    assert (model.line.running, model.line.waiting) == (0, 0)


async def test_a_request_admitted_at_once_reports_no_place(loaded_models):
    items = [item async for item in loaded_models.model.astream_reply(QUESTION, progress=True, temperature=0, max_new_tokens=4)]
    assert not any(isinstance(item, QueuePlace) for item in items)


async def test_the_page_shows_the_place_in_line_then_the_reply(loaded_models):
    handlers = ChatHandlers(loaded_models, CONTROLS)
    first, second = ChatSession(), ChatSession()
    running = handlers.send(first, message("Write the numbers from 1 to 1000, separated by commas."), **settings(3000))
    async for _ in running:
        if first.turns[-1].role == "assistant" and first.turns[-1].content:
            break
    shown = []
    async for update in handlers.send(second, message("What is the capital of France?"), **settings(12)):
        chat = update["chatbot"]
        shown.append(chat[-1]["content"] if chat and chat[-1]["role"] == "assistant" else None)
        if len(shown) == 2:
            assert shown[-1] == "*Waiting for the model: 1 ahead…*", shown
            assert second.turns[-1].waiting == 1
            handlers.stop(first)
            await running.aclose()
    assert "Paris" in second.turns[-1].content
    assert second.turns[-1].waiting is None and not any("Waiting" in text for text in shown[2:] if isinstance(text, str))
    assert (loaded_models.model.line.running, loaded_models.model.line.waiting) == (0, 0)


async def test_the_page_says_when_too_many_wait(loaded_models):
    model = loaded_models.model
    running = await generating(model)
    waiting = [model.astream_reply(QUESTION, progress=True, max_new_tokens=4) for _ in range(MAX_WAITING)]
    for stream in waiting:
        assert isinstance(await anext(stream), QueuePlace)
    session = ChatSession()
    try:
        async for _ in ChatHandlers(loaded_models, CONTROLS).send(session, message("Hello?"), **settings()):
            pass
    finally:
        for stream in [running, *waiting]:
            await stream.aclose()
    [asked] = session.turns
    assert "The model is busy" in asked.error and f"max_waiting={MAX_WAITING}" in asked.error


@pytest.mark.slow
def test_the_api_refuses_beyond_the_bound_with_retry_after_then_answers(loaded_models):
    model = loaded_models.model
    with running_server(add_api(FastAPI(), loaded_models)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        body = {"model": model.model_id, "messages": QUESTION, "max_tokens": 8, "temperature": 0}
        running = client.chat.completions.create(model=model.model_id, messages=COUNTING, max_tokens=3000, temperature=0, stream=True)
        assert next(running).choices[0].delta.role == "assistant"
        # Clients that give up after a second, while they are still in line.
        impatient = [threading.Thread(target=_gives_up, args=(url, {**body, "stream": stream})) for stream in (False, True)]
        for thread in impatient:
            thread.start()
        wait_until(lambda: model.line.waiting == MAX_WAITING, "both wait")

        for stream in (False, True):
            refused = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": stream}, timeout=60)
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "5"
            error = refused.json()["error"]
            assert error["code"] == "model_busy" and error["type"] == "server_error"
            assert f"max_waiting={MAX_WAITING}" in error["message"] and "--max-waiting" in error["message"]

        for thread in impatient:
            thread.join(60)
        wait_until(lambda: model.line.waiting == 0, "the requests whose clients left are out of the line", seconds=10)
        assert model.line.running == 1, "the running reply should be unaffected"
        running.close()
        wait_until(lambda: model.line.running == 0, "the running reply stops after its client left")
        answer = client.chat.completions.create(**body)
        assert "Paris" in answer.choices[0].message.content


def _gives_up(url: str, body: dict) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=httpx.Timeout(60, read=8))


# ---- the line's own rules, without a model


def test_users_take_turns_and_each_sees_where_it_stands():
    line = WaitingLine(slots=1, max_waiting=32, max_waiting_per_user=16)
    [running] = line.join("a")
    flood = line.join("a", 5)
    [late] = line.join("b")
    # a has had its turn (the reply being written), so b's comes before a's next ones.
    assert late.ahead == 1 and [ticket.ahead for ticket in flood] == [2, 3, 4, 5, 6]
    running.leave()
    assert late.admitted and [ticket.ahead for ticket in flood] == [1, 2, 3, 4, 5]
    [again] = line.join("b")
    assert again.ahead == 2, "b's next request waits for a's turn"
    late.leave()
    assert flood[0].admitted and again.ahead == 1


def test_a_user_without_tickets_starts_afresh():
    line = WaitingLine(slots=1, max_waiting=32, max_waiting_per_user=16)
    [first] = line.join("a")
    first.leave()
    [holder] = line.join("b")
    waiting_b = line.join("b", 2)
    [back] = line.join("a")
    assert back.ahead == 1 and [ticket.ahead for ticket in waiting_b] == [2, 3]


def test_a_request_takes_its_places_all_or_none():
    line = WaitingLine(slots=1, max_waiting=3, max_waiting_per_user=2)
    line.join("a")
    with pytest.raises(ModelBusyError, match="max_waiting_per_user=2"):
        line.join("b", 3)
    assert (line.running, line.waiting) == (1, 0), "a refused request must hold no place"
    with pytest.raises(ConfigError, match="at most 3 here"):
        line.join("b", 4)
    line.join("b", 2)
    with pytest.raises(ModelBusyError, match="max_waiting=3"):
        line.join("c", 2)
    assert line.waiting == 2


def test_leaving_gives_every_place_back():
    line = WaitingLine(slots=2, max_waiting=4, max_waiting_per_user=4)
    with line.join("a", 4) as places:
        assert [ticket.admitted for ticket in places] == [True, True, False, False]
    assert (line.running, line.waiting) == (0, 0) and not line._held and not line._last_turn
