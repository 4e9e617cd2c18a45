"""Documents through the API as OpenAI's ``file`` content part, with the official `openai` client
against a real server on the default model."""

from __future__ import annotations

import base64

import openai
import pytest
from fastapi import FastAPI

from api import add_api
from harness.document_samples import LATIN_TEXT, docx_bytes, pdf_bytes, zip_bomb_docx_bytes
from engines import ChatRequest
from harness.running_server import running_server
from limits import Limits

GREEDY = {"temperature": 0, "max_tokens": 12}
PDF_TEXT = ("--- menu.pdf, page 1 of 2 ---\nSoup of the day: tomato.\n--- menu.pdf, page 2 of 2 ---\nDessert: apple pie.\n"
            "--- end of menu.pdf ---")


@pytest.fixture(scope="module")
def client(loaded_models):
    with running_server(add_api(FastAPI(), loaded_models, limits=Limits(max_document_unpacked_size=2**20))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def file_part(data: bytes, filename: str | None, mime: str = "application/pdf") -> dict:
    file = {"file_data": f"data:{mime};base64,{base64.b64encode(data).decode()}"}
    return {"type": "file", "file": file | ({"filename": filename} if filename else {})}


def ask(client, *parts) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(model=client.models.list().data[0].id, messages=[{"role": "user", "content": list(parts)}], **GREEDY)


def test_a_pdf_reaches_the_model_as_its_text_named_by_file_and_page(client, loaded_models):
    pdf = pdf_bytes(["Soup of the day: tomato.", "Dessert: apple pie."])
    answer = ask(client, file_part(pdf, "menu.pdf"), {"type": "text", "text": "What is the soup?"})
    expected = ChatRequest.build([{"role": "user", "content": PDF_TEXT + "\nWhat is the soup?"}], temperature=0, max_new_tokens=12)
    [direct] = loaded_models.model.chat(expected)
    assert answer.choices[0].message.content == direct.response_text
    assert answer.usage.prompt_tokens == loaded_models.model.count_tokens(loaded_models.model.render_prompt(expected))


def test_word_and_text_files_and_a_name_from_the_media_type(client, loaded_models):
    word = docx_bytes(["Agenda"], [["Time", "Topic"], ["9:00", "Budget"]])
    docx_mime = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    for part, text in [
        (file_part(word, None, docx_mime), "--- document.docx ---\nAgenda\n| Time | Topic |\n| 9:00 | Budget |\n--- end of document.docx ---"),
        (file_part(LATIN_TEXT.encode("latin-1"), "cafe.txt", "text/plain"), f"--- cafe.txt ---\n{LATIN_TEXT.strip()}\n--- end of cafe.txt ---"),
    ]:
        answer = ask(client, part)
        expected = ChatRequest.build([{"role": "user", "content": text}])
        assert answer.usage.prompt_tokens == loaded_models.model.count_tokens(loaded_models.model.render_prompt(expected))


@pytest.mark.parametrize(("part", "says"), [
    (file_part(pdf_bytes([None]), "scan.pdf"), "messages[0].content[0]: scan.pdf has no text layer"),
    (file_part(zip_bomb_docx_bytes(8 * 2**20), "bomb.docx"), "bomb.docx unpacks to 8.8 MB, more than the 1.0 MB"),
    (file_part(bytes(range(256)) * 8, "notes.txt", "text/plain"), "notes.txt is not a text file"),
    ({"type": "file", "file": {"file_id": "file-abc123"}}, "file_id names a file uploaded to OpenAI's Files API"),
])
def test_bad_documents_are_refused_with_400_naming_the_file(client, part, says):
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, part)
    assert says in refused.value.message
