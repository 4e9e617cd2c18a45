"""Long chats that never dead-end (engines/compaction.py), on the real embedded model with its
context set to 2,048 tokens: the conversation compacted, or its oldest turns dropped, or refused
as before; what always stays, what is cut first, and what a compaction costs."""

from __future__ import annotations

import asyncio
import time

import pytest

from engines import ChatModel, ChatRequest, ConfigError, KeepSettings, LoadedModels, Response
from engines.compaction import TARGET_SHARE, TRIGGER_SHARE, Compacting, Compaction, summary_budget

CONTEXT = 2048
SYSTEM = "You are a helpful assistant. The secret word is PLUM."
FIRST = "My name is Ada and I live in Lyon. Tell me about rivers."
TIDES = "High tide at 6:12. " * 120


def loaded(backend: str, context: int = CONTEXT):
    if backend == "llamacpp":
        pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)", exc_type=ImportError)
    # transformers in float32: what is kept and dropped does not depend on the dtype, and a CPU
    # without bf16 instructions reads these long prompts about twice as fast in float32.
    dtype = {"infer_dtype": "float32"} if backend == "huggingface" else {}
    with ChatModel({"infer_backend": backend, "max_model_len": context, **dtype}) as model:
        assert model.context_length == context
        yield model


@pytest.fixture(scope="module", params=["llamacpp", "huggingface"])
def model(request):
    """Each backend that counts and keeps a conversation its own way."""
    yield from loaded(request.param)


@pytest.fixture(scope="module")
def llama():
    """The one backend for what does not depend on it (which messages go, and which stay)."""
    yield from loaded("llamacpp")


@pytest.fixture(scope="module")
def small_llama():
    """llama.cpp in half the context: a long chat passes it several times in half the turns."""
    yield from loaded("llamacpp", CONTEXT // 2)


async def answer(model: ChatModel, request: ChatRequest) -> tuple[list, Response]:
    items = [item async for item in model.astream_reply(request, progress=True)]
    [response] = [item for item in items if isinstance(item, Response)]
    return items, response


def user_turn(number: int) -> str:
    return f"Thanks. Now tell me about river number {number}: its source, its length and the towns along it, in detail please."


@pytest.mark.slow
async def test_a_long_chat_goes_on_past_the_context_with_its_head_in_every_prompt(small_llama):
    """On llama.cpp, 24 turns in a context of 1,024 tokens: past it several times, as 40 turns are
    in 2,048 at half the cost. (On transformers the same chat passes too, in 184 s here at 40 turns
    on 2026-11-30: too long to run each time; its compaction is tested below, the summary written
    by the model and the next turn cached.)"""
    model, turns, context = small_llama, 24, small_llama.context_length
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    compactions: list[Compaction] = []
    for turn in range(turns):
        request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=32)
        items, response = await answer(model, request)
        for compaction in (item for item in items if isinstance(item, Compaction)):
            compactions.append(compaction)
            prompt = model.render_prompt(compaction.request)
            assert SYSTEM in prompt and FIRST in prompt, "the system prompt and the first message always stay"
            assert compaction.tokens_after <= TARGET_SHARE * context, compaction.note()
            summary = compaction.messages[compaction.at]
            assert summary["summary"] is True and compaction.summary in summary["content"]
            assert 0 < model.count_tokens(compaction.summary) <= summary_budget(context)
            history = list(compaction.messages)
        assert response.response_text.strip(), f"turn {turn} got an empty reply"
        assert response.prompt_length + response.response_length <= context
        history += [{"role": "assistant", "content": response.response_text}, {"role": "user", "content": user_turn(turn)}]
    assert len(compactions) >= 3, "the chat passed the context several times"
    turns_between = turns / len(compactions)
    assert turns_between >= 2, "a compaction brings the prompt down far enough for several turns"


async def test_a_compaction_reads_its_prompt_once_and_the_next_turn_reuses_it(model):
    history = long_chat(model, 1750)
    request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8)
    items, first = await answer(model, request)
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    assert [type(item) for item in items].index(Compacting) < items.index(compaction), "its progress is said first"
    assert first.prompt_length == compaction.tokens_after < compaction.tokens_before
    history = [*compaction.messages, {"role": "assistant", "content": first.response_text}, {"role": "user", "content": "And then?"}]
    items, second = await answer(model, ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=8))
    assert not any(isinstance(item, Compaction) for item in items), "the next turn fits: no compaction every turn"
    # transformers reuses whole 512-token chunks of a kept cache (engines/backends/huggingface_prompt_cache.py).
    assert second.cached_tokens >= first.prompt_length - 512, "the compacted start is read once, then taken from the cache"


async def test_a_client_that_sends_the_whole_history_again_gets_the_same_summary_without_a_second_summarizing(llama):
    history = long_chat(llama, 1750, topic="Canal")
    request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=4)
    items, _ = await answer(llama, request)
    [first] = [item for item in items if isinstance(item, Compaction)]
    items, _ = await answer(llama, request)
    [again] = [item for item in items if isinstance(item, Compaction)]
    assert again.summary == first.summary and again.messages == first.messages
    assert again.seconds < first.seconds / 2, "kept, not written again"


async def test_drop_oldest_leaves_turns_out_with_a_note_and_refuse_refuses_as_before(llama):
    history = long_chat(llama, 2100)
    items, response = await answer(llama, ChatRequest.build(history, context_policy="drop_oldest", temperature=0, max_new_tokens=4))
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    assert compaction.summary == "" and compaction.replaced > 0
    note = compaction.messages[compaction.at]
    assert note["content"] == f"({compaction.replaced} earlier messages of this conversation were left out to fit the model's context.)"
    assert compaction.messages[:2] == history[:2] and compaction.messages[-1] == history[-1]
    assert response.prompt_length <= TARGET_SHARE * CONTEXT
    for policy in ("refuse", None):
        with pytest.raises(ConfigError, match="more than this model's limit of 2048 tokens"):
            await answer(llama, ChatRequest.build(history, context_policy=policy, max_new_tokens=4))


async def test_old_reasoning_tool_results_and_documents_are_cut_to_a_note_first(llama):
    document = "--- notes.txt ---\n" + "The harbour opens at dawn. " * 150 + "\n--- end of notes.txt ---"
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "tides"}'}}
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST},
               {"role": "assistant", "content": "<think>" + "Let me think about rivers. " * 60 + "</think>Rivers are long."},
               {"role": "user", "content": f"{document}\n\nWhat does it say?"},
               {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": TIDES},
               {"role": "assistant", "content": "It opens at dawn."},
               {"role": "user", "content": "Good. And the ferries?"}]
    tokens = llama.count_prompt_tokens(ChatRequest.build(history))
    assert tokens > TRIGGER_SHARE * (CONTEXT - 4)
    items, _ = await answer(llama, ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=4))
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    assert compaction.replaced == 0 and compaction.shortened == 3, "nothing summarized: the cheap cuts were enough"
    contents = [message["content"] for message in compaction.messages]
    assert "[The document notes.txt, left out to save room.]\n\nWhat does it say?" in contents
    assert f"[The result of lookup, {len(TIDES):,} characters, left out to save room.]" in contents
    assert "Rivers are long." in contents and not any("<think>" in content for content in contents)
    assert compaction.messages[-1] == history[-1], "the latest turn as it was"


async def test_a_cut_never_parts_a_tool_call_from_its_result(llama):
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    for number in range(14):
        call = {"id": f"call_{number}", "type": "function", "function": {"name": "lookup", "arguments": f'{{"river": {number}}}'}}
        history += [{"role": "user", "content": user_turn(number)},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"call_{number}", "name": "lookup", "content": f"River {number} is {number * 40} km long."},
                    {"role": "assistant", "content": f"River {number} runs {number * 40} km through many towns and fields. " * 3}]
    history.append({"role": "user", "content": "Which is longest?"})
    items, _ = await answer(llama, ChatRequest.build(history, context_policy="drop_oldest", temperature=0, max_new_tokens=4))
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    messages = compaction.messages
    assert compaction.replaced > 0 and messages[compaction.at + 1]["role"] == "user", "the cut falls before a user message"
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert messages[index - 1]["tool_calls"][0]["id"] == message["tool_call_id"]
        for call in message.get("tool_calls") or ():
            assert messages[index + 1]["tool_call_id"] == call["id"]


async def test_text_that_characters_over_4_undercounts_never_overflows(small_llama):
    """Code and CJK: a fixture whose tokens characters/4 under-counts by 30 % or more, turn after
    turn, with the oldest dropped (no summary to write): every prompt fits."""
    code = "def f(x):\n    return {k: v for k, v in x.items() if v}  # 注释\n"
    cjk = "東京の川は長くて美しい。北京的河流很长。"
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    dropped = 0
    for turn in range(10):
        text = (code * 3 + cjk * 4) + f" ({turn})"
        history.append({"role": "user", "content": text})
        assert small_llama.count_tokens(text) >= 1.3 * len(text) / 4
        items, response = await answer(small_llama, ChatRequest.build(history, context_policy="drop_oldest", temperature=0, max_new_tokens=8))
        for compaction in (item for item in items if isinstance(item, Compaction)):
            history, dropped = list(compaction.messages), dropped + 1
        assert response.prompt_length + response.response_length <= small_llama.context_length
        history.append({"role": "assistant", "content": response.response_text or "ok"})
    assert dropped >= 2, "the chat passed the context, turn after turn"


async def test_stop_ends_a_compaction_within_a_second(llama):
    history = long_chat(llama, 1750, topic="Stopped")
    request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=4)
    compacting = asyncio.Event()

    async def reply() -> None:
        async for item in llama.astream_reply(request, progress=True):
            if isinstance(item, Compacting):
                compacting.set()

    stream = asyncio.ensure_future(reply())
    await asyncio.wait_for(compacting.wait(), 60)
    await asyncio.sleep(0.5)
    summaries = llama.engine.background_line
    assert summaries.running == 1, "the summary is being written"
    started = time.monotonic()
    stream.cancel()  # as Stop, or a client that leaves, closes the reply
    await asyncio.gather(stream, return_exceptions=True)
    while summaries.running and time.monotonic() - started < 1:
        await asyncio.sleep(0.02)
    assert summaries.running == 0 and time.monotonic() - started < 1


async def test_another_chat_is_answered_at_once_while_a_summary_is_written(llama, caplog):
    """The summary is background work: another chat's request takes no place behind it, and is
    answered whole while the summary waits (llama.cpp pauses it, even in the middle of reading its
    prompt or of a step, and says nothing of it in the log); the summary then goes on and the
    compacted chat gets its reply."""
    caplog.set_level("WARNING", logger="engines.backends.llamacpp")
    history = long_chat(llama, 1750, topic="Paused")
    compacted = asyncio.ensure_future(answer(llama, ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=4)))
    summaries = llama.engine.background_line
    while not summaries.running:
        assert not compacted.done(), "the chat was compacted"
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    other, reply = await answer(llama, ChatRequest.build([{"role": "user", "content": "Say hello."}], temperature=0, max_new_tokens=8,
                                                         user="another user"))
    assert summaries.running == 1 and not compacted.done(), "the other chat was answered while the summary waited"
    assert reply.response_length > 0 and not [item for item in other if getattr(item, "ahead", 0) > 0]
    items, response = await compacted
    [compaction] = [item for item in items if isinstance(item, Compaction)]
    assert compaction.summary.strip() and response.response_length > 0
    assert not [record.getMessage() for record in caplog.records if record.name == "engines.backends.llamacpp"]


async def test_the_model_the_operator_chose_writes_the_summaries_while_it_is_loaded(monkeypatch):
    """--summary-model: another loaded model writes the chat's summary (named in the note); once
    it is unloaded, the chat's own model writes them again. (Half the context, for shorter summaries.)"""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)", exc_type=ImportError)
    loaded_models = LoadedModels(keep=KeepSettings(models_memory=64 << 30, summary_model="writer"))
    try:
        writer = await asyncio.to_thread(loaded_models.load, {"infer_backend": "llamacpp", "max_model_len": CONTEXT // 2, "served_model_name": "writer"})
        chat = await asyncio.to_thread(loaded_models.load, {"infer_backend": "llamacpp", "max_model_len": CONTEXT // 2, "served_model_name": "chat"})
        asked: list[ChatRequest] = []
        writes = writer.achat

        async def writing(request: ChatRequest) -> list[Response]:
            asked.append(request)
            return await writes(request)

        monkeypatch.setattr(writer, "achat", writing)
        request = ChatRequest.build(long_chat(chat, 900, topic="Written"), context_policy="compact", temperature=0, max_new_tokens=4)
        items, response = await answer(chat, request)
        [compaction] = [item for item in items if isinstance(item, Compaction)]
        assert asked and all(summary.background for summary in asked), "the writer wrote the summary, as background work"
        assert compaction.written_by == "writer" and "written by writer" in compaction.note()
        assert compaction.summary.strip() and response.response_length > 0
        written = len(asked)
        await asyncio.to_thread(loaded_models.unload, "writer")
        request = ChatRequest.build(long_chat(chat, 900, topic="Own"), context_policy="compact", temperature=0, max_new_tokens=4)
        items, _ = await answer(chat, request)
        [own] = [item for item in items if isinstance(item, Compaction)]
        assert own.written_by is None and own.summary.strip() and len(asked) == written
    finally:
        await asyncio.to_thread(loaded_models.unload)


def long_chat(llama: ChatModel, tokens: int, topic: str = "River") -> list[dict]:
    """A chat of about ``tokens`` prompt tokens, its last message the user's."""
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
    number = 0
    while llama.count_prompt_tokens(ChatRequest.build(history)) < tokens:
        history += [{"role": "assistant", "content": f"{topic} {number} is long and passes many old towns, mills and bridges. " * 2},
                    {"role": "user", "content": user_turn(number)}]
        number += 1
    return history


# ---- through the API, with the official client


def test_the_api_compacts_where_the_request_or_the_server_asks_and_says_what_it_did():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)", exc_type=ImportError)
    import openai
    from fastapi import FastAPI

    from api import add_api
    from engines import LoadedModels
    from harness.running_server import running_server

    loaded_models = LoadedModels()
    loaded_models.load({"infer_backend": "llamacpp", "max_model_len": CONTEXT})
    try:
        history, too_long = long_chat(loaded_models.model, 1750, topic="Lake"), long_chat(loaded_models.model, 2100, topic="Sea")
        asked = {"model": loaded_models.model.model_id, "messages": history, "max_tokens": 4, "temperature": 0}
        with running_server(add_api(FastAPI(), loaded_models)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
            with pytest.raises(openai.BadRequestError, match="more than this model's limit"):
                client.chat.completions.create(**{**asked, "messages": too_long})
            reply = client.chat.completions.create(**asked, extra_body={"context_policy": "compact"})
            compaction = reply.model_extra["compaction"]
            first, replaced = compaction["first_replaced"], compaction["replaced"]
            assert (compaction["policy"], first) == ("compact", 2) and replaced > 0
            assert compaction["message"]["content"].endswith(compaction["summary"]) and compaction["summary"]
            assert reply.usage.prompt_tokens == compaction["prompt_tokens_after"] < compaction["prompt_tokens_before"]
            assert compaction["freed_tokens"] == compaction["prompt_tokens_before"] - compaction["prompt_tokens_after"]
            # The client takes the summary in place of the messages it replaced, and goes on from there.
            compacted = [*history[:first], compaction["message"], *history[first + replaced:]]
            assert loaded_models.model.count_prompt_tokens(ChatRequest.build(compacted)) == compaction["prompt_tokens_after"]
            chunks = list(client.chat.completions.create(**asked, extra_body={"context_policy": "compact"}, stream=True))
            [streamed] = [chunk.model_extra["compaction"] for chunk in chunks if chunk.model_extra.get("compaction")]
            # A chunk leaves out what is null (summary_by, where the chat's own model wrote the summary).
            assert streamed == {key: value for key, value in compaction.items() if value is not None}, "the same summary, kept for the same messages"
            assert chunks.index(next(c for c in chunks if c.model_extra.get("compaction"))) < len(chunks) - 1
        with running_server(add_api(FastAPI(), loaded_models, context_policy="drop_oldest")) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
            reply = client.chat.completions.create(**asked)
            assert reply.model_extra["compaction"]["policy"] == "drop_oldest", "the server's default, for a request that names none"
            with pytest.raises(openai.BadRequestError, match="more than this model's limit"):
                client.chat.completions.create(**{**asked, "messages": too_long}, extra_body={"context_policy": "refuse"})
    finally:
        loaded_models.unload()
