"""Documents past the model's context through the API, with the official `openai` client against a
real server on the default model: answered from their passages, the choice in the response's
``documents`` extension, each reply's citations read back to them, streamed and not; kept in the
library of the client, once."""

from __future__ import annotations

import base64
import json
import re

import httpx
import openai
import pytest
from fastapi import FastAPI

from api import add_api
from harness.document_corpus import FACTS, corpus, inventory_code
from harness.running_server import running_server
from library.whole_document import OUTLINE_HEADING
from store import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["huggingface", "llamacpp"])
def served(request, tmp_path_factory):
    """The API on the default model, on transformers and on llama.cpp, each with a library of its own."""
    loaded_models = request.getfixturevalue("loaded_models" if request.param == "huggingface" else "llamacpp_models")
    folder = tmp_path_factory.mktemp("library")
    store = open_store(f"sqlite:///{folder / 'chats.db'}", data=folder)
    try:
        with running_server(add_api(FastAPI(), loaded_models, store=store)) as url:
            yield url, store, loaded_models
    finally:
        store.close()


def file_part(name: str) -> dict:
    data = base64.b64encode(corpus()[name]).decode()
    return {"type": "file", "file": {"file_data": f"data:application/octet-stream;base64,{data}", "filename": name}}


def test_a_document_past_the_context_is_answered_from_passages_said_in_the_response(served):
    url, store, loaded_models = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    fact = next(fact for fact in FACTS if fact.name == "pump_manual.md" and "warranty" in fact.question)
    messages = [{"role": "user", "content": [file_part("pump_manual.md"), file_part("handbook.pdf"), {"type": "text", "text": fact.question}]}]
    answer = client.chat.completions.create(model=loaded_models.model.model_id, messages=messages, temperature=0, max_tokens=6)
    extra = answer.model_extra
    manual, handbook = extra["documents"]
    together = manual["tokens"] + handbook["tokens"]
    for report, name in ((manual, "pump_manual.md"), (handbook, "handbook.pdf")):
        assert report["name"] == name and together > report["tokens_left"]
        assert report["note"] == (f"{name}: {report['tokens']:,} tokens ({together:,} with the other documents) > {report['tokens_left']:,} "
                                  "left in the context: answered from "
                                  f"{len(report['passages'])} passage{'s' if len(report['passages']) != 1 else ''}, "
                                  f"{report['passage_tokens']:,} tokens")
    given = manual["passages"] + handbook["passages"]
    assert [passage["number"] for passage in given] == list(range(1, len(given) + 1))
    assert any(fact.answer in passage["text"] for passage in manual["passages"])
    assert answer.usage.prompt_tokens < loaded_models.model.context_length
    # Every citation the reply makes is a passage given, by its number; the rest are said apart.
    message = answer.choices[0].message.model_extra
    numbers = [passage["number"] for passage in message["citations"]]
    assert set(numbers) <= {passage["number"] for passage in given} and not set(numbers) & set(message.get("unknown_citations") or [])
    assert [library.name for library in store.library.documents("api:127.0.0.1")] == ["handbook.pdf", "pump_manual.md"]

    # Streamed: the documents first, then the reply, its citations with its end. The same files are not embedded again.
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=600, json={
            "model": loaded_models.model.model_id, "messages": messages, "temperature": 0, "max_tokens": 6, "stream": True}) as response:
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: {")]
    # (A stream's chunks leave out what is null, as OpenAI's do: a text file's passages have no page.)
    assert events[0]["documents"] == [{**report, "passages": [{name: value for name, value in passage.items() if value is not None}
                                                              for passage in report["passages"]]} for report in extra["documents"]]
    last = next(event for event in reversed(events) if event.get("choices") and event["choices"][0].get("finish_reason"))
    assert "citations" in last["choices"][0]["delta"]
    assert len(store.library.documents("api:127.0.0.1")) == 2


def test_documents_that_fit_go_whole_and_say_nothing(served):
    url, _, loaded_models = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    small = base64.b64encode(b"The gate code is 4471.").decode()
    answer = client.chat.completions.create(model=loaded_models.model.model_id, max_tokens=4, messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_data": f"data:text/plain;base64,{small}", "filename": "gate.txt"}},
        {"type": "text", "text": "What is the gate code?"}]}])
    assert answer.model_extra["documents"] is None and answer.choices[0].message.model_extra["citations"] is None


def test_a_count_over_a_whole_code_file_is_answered_with_the_exact_count(served):
    url, _, loaded_models = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    code = base64.b64encode(inventory_code().encode()).decode()  # 40 KB: 128 functions, 6 classes, "def" 257 times
    answer = client.chat.completions.create(model=loaded_models.model.model_id, temperature=0, max_tokens=24, messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_data": f"data:text/x-python;base64,{code}", "filename": "inventory.py"}},
        {"type": "text", "text": "How many functions does inventory.py define?"}]}])
    [report] = answer.model_extra["documents"]
    # A question about the whole file that only asks what the server counts: its outline alone goes to the model.
    assert report["read_whole"] and [passage["heading"] for passage in report["passages"]] == [OUTLINE_HEADING]
    assert report["passages"][0]["text"].startswith("Outline, counted by the server: inventory.py defines exactly 128 functions and 6 classes.")
    assert report["note"].endswith("read whole for a question about all of it: its outline sent, which counts what the question asks")
    assert re.search(r"\b128\b", answer.choices[0].message.content), answer.choices[0].message.content


@pytest.mark.parametrize(("question", "choice"), [
    ("List the functions.", "whole"),  # searched by its words: read whole by hand (its outline answers it)
    ("How many functions does inventory.py define?", "search"),  # read whole by its words: searched by hand
])
def test_the_requests_long_documents_field_chooses_search_or_whole_over_the_questions_words(served, question, choice):
    url, _, loaded_models = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    code = base64.b64encode(inventory_code().encode()).decode()
    messages = [{"role": "user", "content": [{"type": "file", "file": {"file_data": f"data:text/x-python;base64,{code}", "filename": "inventory.py"}},
                                             {"type": "text", "text": question}]}]
    answer = client.chat.completions.create(model=loaded_models.model.model_id, temperature=0, max_tokens=2, messages=messages,
                                            extra_body={"long_documents": choice})
    [report] = answer.model_extra["documents"]
    headings = [passage["heading"] for passage in report["passages"]]
    assert report["read_whole"] is (choice == "whole")
    assert (headings == [OUTLINE_HEADING]) if choice == "whole" else (OUTLINE_HEADING not in headings and "answered from" in report["note"])
    # A choice that is none is refused, naming the field and its choices.
    with pytest.raises(openai.BadRequestError, match="long_documents: Input should be 'auto', 'search' or 'whole'") as refused:
        client.chat.completions.create(model=loaded_models.model.model_id, max_tokens=2, messages=messages, extra_body={"long_documents": "sometimes"})
    assert refused.value.body["param"] == "long_documents"
