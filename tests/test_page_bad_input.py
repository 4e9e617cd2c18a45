"""Bad input on the page: each kind is shown as a clear message, and the conversation stays.

Every kind goes through the page's own handlers (webui/handlers.py) on real models: the embedded
text model, and tiny random-weight Qwen2-VL (images, video) and Qwen2-Audio models with their real
processors (harness/tiny_models.py). For each kind the test checks what the page shows: the message
names what was wrong (and, where there is something to do, what), no stack trace is shown, the
conversation that was there before is unchanged, the user's own message is kept, and the model
answers the next message. The kinds are the parametrize ids; SENT_KINDS, IMPORTED_KINDS and
HANDLED_KINDS count them. What only a browser shows is in tests/test_browser_bad_input.py.
"""

import base64
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from chat.session import ChatSession
from chat.turns import Turn
from engines import LoadedModels
from harness.tiny_models import build_qwen2_audio
from limits import Limits
from store import MessageTree
from tests.media_samples import bomb_png, png_bytes, solid_image, tone, write_audio, write_video
from tests.page_input import CONTROLS, message, run, settings, written_imports
from webui.chat_view import render, render_turn
from webui.handlers import ChatHandlers
from webui.inert_markdown import as_written

REFUSED = "⚠ The model could not answer"
# A Python traceback, an exception's repr, or a source place of C/C++ code such as a decoder's log line.
STACK_TRACE = re.compile(r'Traceback|File "|\w+Error\(|\.(?:py|c|cc|cpp|h):\d+')
FOLLOW_UP = "Say yes."


# ---- the models, each with a prior exchange that every kind must leave as it was


@dataclass
class Chat:
    """A model in a LoadedModels, the page's handlers over it, and the exchange each test starts from."""

    loaded_models: LoadedModels
    handlers: ChatHandlers
    prior: list[Turn] = field(default_factory=list)

    def session(self) -> ChatSession:
        return ChatSession(tree=MessageTree.line([turn.model_copy(deep=True) for turn in self.prior]))


def models_loaded_with(args: dict[str, Any]) -> LoadedModels:
    loaded_models = LoadedModels()
    loaded_models.load({"infer_backend": "huggingface", **args})
    return loaded_models


async def chat_on(loaded_models: LoadedModels, first: dict[str, Any]) -> Chat:
    chat = Chat(loaded_models, ChatHandlers(loaded_models, CONTROLS))
    session = ChatSession()
    await run(chat.handlers.send(session, first, **settings(6)))
    assert [t.role for t in session.turns] == ["user", "assistant"] and not session.turns[0].error, session.turns
    chat.prior = session.turns
    return chat


@pytest.fixture(scope="module")
async def text_chat(loaded_models):
    """On the session's default model."""
    return await chat_on(loaded_models, message("Name a color."))


@pytest.fixture(scope="module")
async def vision_chat(tmp_path_factory, tiny_vision_model):
    picture = tmp_path_factory.mktemp("vision") / "red.png"
    solid_image((255, 0, 0)).save(picture)
    chat = await chat_on(models_loaded_with({"model_name_or_path": str(tiny_vision_model)}), message("What color is this?", [str(picture)]))
    yield chat
    chat.loaded_models.unload()


@pytest.fixture(scope="module")
async def audio_chat(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audio")
    clip = write_audio(folder / "beep.wav", tone(1.0, 16000), 16000)
    chat = await chat_on(models_loaded_with({"model_name_or_path": str(build_qwen2_audio(folder / "model"))}), message("What is this sound?", [str(clip)]))
    yield chat
    chat.loaded_models.unload()


@pytest.fixture
def chat(request, case):
    """The model the case is sent to (loaded once for the module, the first time a case needs it)."""
    return request.getfixturevalue(f"{case.model}_chat")


# ---- bad files, written on the fly


def write(name: str, data: bytes) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        path = folder / name
        path.write_bytes(data)
        return str(path)

    return make


def noise_png() -> bytes:
    """A PNG that does not compress, so that half of it is most of its pixels missing."""
    return png_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)))


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    import soundfile

    soundfile.write(buffer, tone(seconds, rate), rate, format="WAV")
    return buffer.getvalue()


def mp4_file(name: str) -> Callable[[Path], str]:
    return lambda folder: str(write_video(folder / name, seconds=1.0))


SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'
RAW_PCM = (tone(2.0, 16000) * 32767).astype("<i2").tobytes()  # samples with no header saying their rate or format


# ---- kinds sent as a message


@dataclass
class Sent:
    """A message (text, files) and settings sent on ``model``; ``says``: what the page must show."""

    kind: str
    model: str
    says: str
    text: str = "What is this?"
    files: tuple[Callable[[Path], str], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    marks: tuple = ()


TOOLS_HINT = r"\[\{\"type\": \"function\""
SENT = [
    # Images, to Qwen2-VL.
    Sent("corrupt image", "vision", r"The image 2 \(photo.jpg\) is not an image this app can read\. Send a PNG, JPEG",
         files=(write("photo.jpg", b"\xff\xd8\xff\xe0 not a picture at all " * 40),)),
    Sent("truncated image", "vision", r"The image 2 \(cut.png\) could not be decoded \(.*truncated.*\): the file is damaged or incomplete\. Upload it again",
         files=(write("cut.png", noise_png()[: len(noise_png()) // 2]),)),
    Sent("zero-byte image", "vision", r"The image 2 \(empty.png\) is an empty file \(0 bytes\)\. Upload the file again",
         files=(write("empty.png", b""),)),
    Sent("decompression-bomb image", "vision", r"The image 2 \(bomb.png\) .*larger than the \d+ million pixels.*decompression bombs\)\. Downscale it",
         files=(write("bomb.png", bomb_png()),)),
    Sent("unsupported image type (SVG)", "vision", r"The image 2 \(drawing.svg\) is not an image this app can read\. Send a PNG, JPEG",
         files=(write("drawing.svg", SVG),)),
    Sent("audio file named .png", "vision", r"The image 2 \(sound.png\) is not an image this app can read",
         files=(write("sound.png", wav_bytes(1.0)),)),
    Sent("file that is neither media nor a document", "vision", r"notes.zip is not an image, video, audio or document file; remove it",
         files=(write("notes.zip", b"PK\x05\x06" + bytes(18)),)),
    Sent("audio to an image-and-video model", "vision", r"This model does not accept audios\. Remove the audio or load a model that takes audios",
         files=(write("beep.wav", wav_bytes(1.0)),)),
    Sent("image placeholder typed in the text", "vision", r"The messages hold 2 <image> placeholder\(s\) but 1 image file\(s\) were given: use one <image> per image",
         text="Describe <image> please."),
    # Video, to Qwen2-VL (transformers' video processors need torchvision).
    Sent("corrupt video", "vision", r"The video 1 \(party.mp4\) could not be opened as a video .*Send an MP4, WebM",
         files=(write("party.mp4", b"\x00\x00\x00\x18ftypmp42 garbage " * 60),), marks=pytest.mark.video),
    Sent("zero-byte video", "vision", r"The video 1 \(empty.mp4\) is an empty file \(0 bytes\)\. Upload the file again",
         files=(write("empty.mp4", b""),), marks=pytest.mark.video),
    Sent("image mislabelled as .mp4", "vision", r"The video 1 \(photo.mp4\) could not be opened as a video .*Send an MP4, WebM",
         files=(write("photo.mp4", png_bytes(solid_image((0, 0, 255)))),), marks=pytest.mark.video),
    Sent("audio sent as video", "vision", r"The video 1 \(song.mp4\) could not be opened as a video .*Send an MP4, WebM",
         files=(write("song.mp4", wav_bytes(1.0)),), marks=pytest.mark.video),
    # Audio, to Qwen2-Audio.
    Sent("corrupt audio", "audio", r"The audio 2 \(voice.wav\) is not an audio file this app can read .*Send a WAV, FLAC, OGG or MP3",
         files=(write("voice.wav", b"RIFF\x10\x00\x00\x00WAVEjunk" * 30),)),
    Sent("zero-byte audio", "audio", r"The audio 2 \(empty.wav\) is an empty file \(0 bytes\)\. Upload the file again",
         files=(write("empty.wav", b""),)),
    Sent("over-long audio", "audio", r"The audio 2 \(speech.wav\) is 45 s long; the limit is 30 s \(this model hears at most that much per clip\)\. Trim it or send a shorter clip",
         files=(write("speech.wav", wav_bytes(45.0)),)),
    Sent("audio without a readable header", "audio", r"The audio 2 \(raw.wav\) is not an audio file this app can read",
         files=(write("raw.wav", RAW_PCM),)),
    Sent("image named .wav", "audio", r"The audio 2 \(picture.wav\) is not an audio file this app can read",
         files=(write("picture.wav", png_bytes(solid_image((0, 255, 0)))),)),
    Sent("video to an audio model", "audio", r"This model does not accept videos\. Remove the video or load a model that takes videos",
         files=(mp4_file("clip.mp4"),)),
    # Text, to the embedded model.
    Sent("media to a text-only model", "text", r"This model does not accept images\. Remove the image or load a model that takes images",
         files=(write("red.png", png_bytes(solid_image((255, 0, 0)))),)),
    Sent("invalid tools JSON", "text", r"Tools are not valid JSON \(.* at line 1 column \d+\)",
         text="Weather in Oslo?", settings={"tools": '[{"type": "function", "function": {"name": "get_weather"'}),
    Sent("tools not a list", "text", r"Tools must be a JSON list of function schemas, like " + TOOLS_HINT,
         text="Weather in Oslo?", settings={"tools": '"get_weather"'}),
    Sent("tool without a name", "text", r"Each tool needs a function with a name; this one has none",
         text="Weather in Oslo?", settings={"tools": '[{"type": "function", "function": {"parameters": {}}}]'}),
    Sent("a reply format that does not exist", "text", r"reply_format must be one of: text, json_object, json_schema; got 'yaml'",
         text="Hi", settings={"reply_format": "yaml"}),
    Sent("a reply schema that is not JSON", "text", r"The JSON schema is not valid JSON \(.* at line 1 column \d+\)",
         text="Describe a person.", settings={"reply_format": "json_schema", "reply_schema": '{"type": "object",'}),
    Sent("a reply schema with a keyword not enforced", "text", r"schema uses the keyword 'not', which replies cannot be held to here",
         text="Describe a person.", settings={"reply_format": "json_schema", "reply_schema": '{"not": {"type": "string"}}'}),
    Sent("a giant reply schema", "text", r"The JSON schema is [\d,]+ characters long; a reply schema can be at most 32,000",
         text="Describe a person.", settings={"reply_format": "json_schema", "reply_schema": json.dumps({"enum": ["x" * 50] * 10_000})}),
    Sent("giant paste (over the context)", "text",
         r"The conversation is \d+ tokens long, more than this model's limit of 8192 tokens .*Start a new chat, shorten or remove earlier messages",
         text="Please summarise this log: " + "error at line 42 in module x; " * 2000),
    Sent("seed 2**80", "text", r"seed must be in \[0, ", text="Hi", settings={"seed": 2**80}),
    Sent("negative max_new_tokens", "text", r"max_new_tokens must be in \[1, ", text="Hi", settings={"max_new_tokens": -5}),
    Sent("NaN temperature", "text", r"temperature must be", text="Hi", settings={"temperature": float("nan")}),
]


def shown_text(chat: list[dict]) -> str:
    return json.dumps(chat, ensure_ascii=False)


async def answered_next(chat: Chat, session: ChatSession) -> None:
    """The model answers a normal message after the bad one, in the same conversation."""
    before = len(session.turns)
    await run(chat.handlers.send(session, message(FOLLOW_UP), **settings(4)))
    assert [t.role for t in session.turns[before:]] == ["user", "assistant"] and not session.turns[before].error, session.turns[before:]
    assert session.turns[-1].stats is not None, "no finished reply"


@pytest.mark.parametrize("case", [pytest.param(case, id=case.kind, marks=case.marks) for case in SENT])
async def test_a_bad_message_is_shown_as_a_clear_message_and_the_chat_stays(case, chat, tmp_path):
    session = chat.session()
    files = [make(tmp_path) for make in case.files]
    updates = await run(chat.handlers.send(session, message(case.text, files), **{**settings(6), **case.settings}))
    shown = updates[-1]["chatbot"]

    # The prior exchange is as it was, and the message sent is kept, marked with the reason.
    prior = len(chat.prior)
    assert session.turns[:prior] == chat.prior
    [asked] = session.turns[prior:]
    assert (asked.role, asked.content, asked.files) == ("user", case.text.strip(), files)
    prior_shown = render(MessageTree.line(chat.prior))
    assert shown[: len(prior_shown)] == prior_shown
    assert shown[len(prior_shown):] == render_turn(session.tree, session.tree.shown)
    # The message under it says what was wrong, and nothing shown is a stack trace.
    refusal = shown[-1]
    assert refusal["metadata"]["title"] == REFUSED
    # As the page shows it: its text's HTML made inert (an "<image>" in it is text).
    assert re.search(case.says, as_written(refusal["content"]), re.S), refusal["content"]
    assert not STACK_TRACE.search(shown_text([update["chatbot"] for update in updates])), refusal["content"]
    assert str(tmp_path) not in refusal["content"], "the message shows where the file is on the server"
    await answered_next(chat, session)


# ---- kinds of conversation file imported


def conversation(turns: Any, **extra: Any) -> bytes:
    return json.dumps({"system_prompt": "", "turns": turns, **extra}).encode()


def with_media(name: str, data: str) -> bytes:
    return conversation([{"role": "user", "content": "look", "files": [{"name": name, "data": data}]}])


PIXEL = base64.b64encode(png_bytes(solid_image((255, 0, 0), (2, 2)))).decode()
BIG_MEDIUM = base64.b64encode(b"\0" * 6000).decode()


@dataclass
class Imported:
    """A conversation file imported on the text model's page, under ``limits``."""

    kind: str
    data: bytes
    says: str
    limits: Limits = field(default_factory=Limits)


IMPORTED = [
    Imported("not JSON", b"Hello, this is my chat {", r"not an anychat conversation file: it is not JSON text"),
    Imported("empty file", b"", r"not an anychat conversation file: it is not JSON text"),
    Imported("binary file", bytes(range(256)) * 4, r"not an anychat conversation file: it is not JSON text"),
    Imported("JSON of the wrong shape", b"[1, 2, 3]", r"not an anychat conversation file: the file: "),
    Imported("message content not text", conversation([{"role": "user", "content": {"text": 5}}]),
             r"not an anychat conversation file: turns\.0\.content: "),
    Imported("unknown role", conversation([{"role": "system-admin", "content": "x"}]), r"not an anychat conversation file: turns\.0\.role: "),
    Imported("deeply nested JSON", b'{"turns": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
             r"not an anychat conversation file: it is nested too deeply"),
    Imported("markup in a reply's stats", conversation([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "stats": {"tokens": 1, "tokens_per_second": 1.0, "first_token_seconds": 0.1,
                                                             "backend": "<img src=x onerror=alert(1)>", "finish_reason": "stop"}}]),
             r"not an anychat conversation file: turns\.1\.stats\.backend: "),
    Imported("server path as media", conversation([{"role": "user", "content": "look", "files": ["/etc/passwd"]}]),
             r"exported by an older version of anychat.*\(passwd\).*cannot be imported\. Remove the \"files\" lists"),
    Imported("file: URL as media", with_media("a.png", "file:///etc/passwd"), r"'a.png' is not embedded in the file: .*Paths and links are never read"),
    Imported("data URL that is not media", with_media("a.png", "data:text/html;base64,PHNjcmlwdD4="), r"'a.png' is not embedded in the file"),
    Imported("data URL that is not base64", with_media("a.png", "data:image/png;base64,<<not base64>>"), r"'a.png' is not embedded in the file"),
    Imported("data URL with broken base64", with_media("a.png", "data:image/png;base64,abcde"), r"'a.png' is not valid base64"),
    Imported("medium over --max-import-media-size", with_media("big.wav", f"data:audio/wav;base64,{BIG_MEDIUM}"),
             r"'big.wav' is about 5.9 KB, over this server's limit of 4 KB for each medium .*\(--max-import-media-size\)",
             Limits(max_import_media_size=4096)),
    Imported("file over --max-upload-size", with_media("big.wav", f"data:audio/wav;base64,{BIG_MEDIUM}"),
             r"The file is [\d.]+ KB, over this server's limit of 4 KB for files put on the page \(--max-upload-size\)",
             Limits(max_upload_size=4096)),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.kind) for case in IMPORTED])
async def test_a_bad_conversation_file_is_refused_clearly_and_the_chat_stays(case, text_chat, tmp_path, upload_folder):
    handlers = ChatHandlers(text_chat.loaded_models, CONTROLS, limits=case.limits)
    session = text_chat.session()
    path = tmp_path / "conversation.json"
    path.write_bytes(case.data)
    with pytest.raises(gr.Error) as refused:
        handlers.import_(session, str(path))
    shown = refused.value.message
    assert shown.startswith("Could not import conversation.json: ")
    assert re.search(case.says, shown, re.S), shown
    assert not STACK_TRACE.search(shown) and str(tmp_path) not in shown, shown
    assert session.turns == text_chat.prior and written_imports(upload_folder) == []
    await answered_next(text_chat, session)


# ---- kinds the page takes without an error, harmlessly


async def test_a_message_of_only_whitespace_is_ignored(text_chat):
    session = text_chat.session()
    [shown] = await run(text_chat.handlers.send(session, message(" \n\t  "), **settings()))
    assert session.turns == text_chat.prior and shown["chatbot"] == render(MessageTree.line(text_chat.prior))
    assert shown["message_box"]["value"] == {"text": "", "files": []} and shown["message_box"]["interactive"]
    await answered_next(text_chat, session)


async def test_a_path_in_an_embedded_name_stays_in_the_import_folder(text_chat, tmp_path, upload_folder):
    path = tmp_path / "conversation.json"
    path.write_bytes(with_media("../../../../home/user/.bashrc", f"data:image/png;base64,{PIXEL}"))
    session = text_chat.session()
    text_chat.handlers.import_(session, str(path))
    [written] = written_imports(upload_folder)
    assert session.turns[0].files == [str(written)] and written.name == "bashrc.png"
    assert not (tmp_path / "home").exists()


HANDLED = ["message of only whitespace", "path in an embedded file name"]


def test_the_kinds_are_counted():
    """The README's figure: every kind of bad input here, by name."""
    kinds = [case.kind for case in SENT] + [case.kind for case in IMPORTED] + HANDLED
    assert len(set(kinds)) == len(kinds)
    print(f"\n{len(kinds)} kinds of bad input on the page: {len(SENT)} sent, {len(IMPORTED)} imported, {len(HANDLED)} taken harmlessly")
    assert len(kinds) >= 24
