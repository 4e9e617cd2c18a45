"""Request and response bodies of the OpenAI-compatible API, as pydantic models.

Requests are strict: an unknown field is an error naming it (as OpenAI's own API does), so a
setting a client relies on is never dropped silently. Fields OpenAI defines that this server
cannot honour are still declared, so the route can refuse them with a message that says why.
Every generation setting takes its range and description from GenerationArgs, where it is
declared, so a value out of it is a 400 naming the API's own parameter (OpenAI's names map to
GenerationArgs' in ``GENERATION_NAMES``), and NaN or infinity is no number at all. Text must be valid
Unicode: JSON's \\u escapes can write a lone surrogate, which no tokenizer (nor our own JSON
answers) can encode, so a body holding one is refused before anything reads it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engines.compaction import Compaction
from engines.context_settings import ContextPolicy, ContextSettings
from library.whole_document import LongDocuments, LongDocumentSettings
from engines.generation_args import REASONING_EFFORTS, GenerationArgs
from engines.logprobs import MAX_TOP_LOGPROBS
from engines.prompt_progress import PromptRead
from engines.settings import field_range
from library.fitting import GivenPassage

from .errors import APIError
from .logprobs import ChatLogprobs

# OpenAI's names for generation settings, where ours differ; every other setting keeps its name.
GENERATION_NAMES = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens", "n": "num_return_sequences"}


class _Strict(BaseModel):
    # Strict types, as OpenAI's API has them: "5" is no integer, 2.5 no count, "yes" no boolean.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class _RequestBody(_Strict):
    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        try:
            json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the body holds a lone surrogate ({ascii(error.object[error.start:error.end])}), which is not "
                "valid Unicode text; send text as UTF-8"
            ) from None
        return data


# ---- content parts (OpenAI's names, plus vLLM's audio_url / video_url)


class URLRef(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: URLRef


class InputAudio(_Strict):
    data: str = Field(description="base64 of the audio file")
    format: str = Field(description='"wav", "mp3", ...')


class InputAudioPart(_Strict):
    type: Literal["input_audio"]
    input_audio: InputAudio


class AudioURLPart(_Strict):
    type: Literal["audio_url"]
    audio_url: URLRef


class VideoURLPart(_Strict):
    type: Literal["video_url"]
    video_url: URLRef


class FileRef(_Strict):
    file_data: str | None = Field(None, description="the file as a data: URL (data:application/pdf;base64,...) or bare base64")
    filename: str | None = Field(None, description="its name, whose extension says what it is (report.pdf, notes.docx, data.csv)")
    file_id: str | None = Field(None, description="a file uploaded with OpenAI's Files API, which this server does not have")


class FilePart(_Strict):
    """A document (PDF, Word, text), as OpenAI's ``file`` part: its text goes into the message."""

    type: Literal["file"]
    file: FileRef


ContentPart = Annotated[
    TextPart | ImagePart | InputAudioPart | AudioURLPart | VideoURLPart | FilePart, Field(discriminator="type")
]


# ---- messages and tools


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="the arguments as a JSON object, in text")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    refusal: str | None = None


class FunctionSchema(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionSchema


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None
    include_prompt_progress: bool = Field(False, description=(
        "This server's extension: while a long prompt is read (llama.cpp reads 512 tokens a step), a chunk with no choices "
        "and a prompt_progress object after each step, in llama.cpp's server's shape."))


class PromptProgress(BaseModel):
    """How far the prompt of choice ``index`` is read: ``processed`` of its ``total`` tokens,
    ``cache`` of them taken from the prompt cache, after ``time_ms``."""

    index: int
    total: int
    cache: int
    processed: int
    time_ms: float

    @classmethod
    def of(cls, index: int, read: PromptRead) -> PromptProgress:
        return cls(index=index, total=read.total, cache=read.cached, processed=read.read, time_ms=round(read.seconds * 1000, 1))


def wants_progress(body: Any) -> bool:
    """Whether a streamed request asked for its prompt's reading (StreamOptions.include_prompt_progress)."""
    return bool(body.stream_options and body.stream_options.include_prompt_progress)


def generation_field(name: str, default: Any = None) -> Any:
    """The field of API parameter ``name`` that sets a generation setting: its range and
    description are the setting's; ``default``, None, means "not given"."""
    setting = GenerationArgs.model_fields[GENERATION_NAMES.get(name, name)]
    return Field(default, description=setting.description, **field_range(setting))


class ChatCompletionRequest(_RequestBody):
    model: str
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = generation_field("temperature")
    top_p: float | None = generation_field("top_p")
    max_tokens: int | None = generation_field("max_tokens")
    max_completion_tokens: int | None = generation_field("max_completion_tokens")
    stop: str | list[str] | None = generation_field("stop")
    n: int = generation_field("n", default=1)
    seed: int | None = generation_field("seed")
    presence_penalty: float | None = generation_field("presence_penalty")
    frequency_penalty: float | None = generation_field("frequency_penalty")
    reasoning_effort: Literal[REASONING_EFFORTS] | None = generation_field("reasoning_effort")
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS, description="alternatives per token where logprobs is true")
    # Declared so that they can be refused with a reason; see completions.refuse_unsupported.
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    # Accepted and ignored, as they do not change the reply.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    # Extensions that vLLM's API accepts as well.
    chat_template_kwargs: dict[str, Any] | None = Field(None, description='variables for the chat template, like {"enable_thinking": false}')
    top_k: int | None = generation_field("top_k")
    repetition_penalty: float | None = generation_field("repetition_penalty")
    min_p: float | None = generation_field("min_p")
    continue_final_message: bool = Field(False, description="go on with the last message, an assistant reply (stopped, cut, or "
                                                            "written by the client as the start of the answer), instead of answering it")
    add_generation_prompt: bool = Field(True, description="open a new assistant turn after the messages; false with "
                                                          "continue_final_message, which continues the last one instead")
    # This server's extension (docs/api.md): left out, the server's --context-policy where one was given, else refuse.
    context_policy: ContextPolicy | None = Field(None, description=ContextSettings.model_fields["context_policy"].description)
    # This server's extension (docs/api.md): left out, auto.
    long_documents: LongDocuments = Field("auto", description=LongDocumentSettings.model_fields["long_documents"].description)

    def generation(self) -> dict[str, Any]:
        """The generation settings the request gives, under GenerationArgs' names. Where both are
        given, max_completion_tokens (declared after it) wins over its older name max_tokens.
        logprobs (true) with top_logprobs (k) is GenerationArgs' logprobs=k."""
        settings = generation_settings(self, exclude={"logprobs", "top_logprobs"})
        if self.logprobs:
            settings["logprobs"] = self.top_logprobs or 0
        return settings


def chat_completion_request(fields: dict[str, Any]) -> ChatCompletionRequest:
    """The Chat Completions request another dialect's request is (api/responses.py,
    api/anthropic_messages.py), from its fields (None: not given); what Chat Completions checks
    that the other's shape does not (a conversation left empty) is a 400 naming it."""
    try:
        return ChatCompletionRequest.model_validate({name: value for name, value in fields.items() if value is not None}, strict=False)
    except ValidationError as error:
        [first, *_] = error.errors()
        where = ".".join(str(part) for part in first["loc"])
        raise APIError(400, f"Invalid request: {where}: {first['msg']}.", param=where) from None


def generation_settings(body: BaseModel, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The fields of a request's ``body`` that are generation settings (under OpenAI's names or
    GenerationArgs' own), given, under GenerationArgs' names; in field order, so a later alias wins."""
    return {GENERATION_NAMES.get(name, name): value for name, value in body
            if value is not None and name not in exclude and GENERATION_NAMES.get(name, name) in GenerationArgs.model_fields}


class ScoreRequest(_RequestBody):
    model: str
    input: str | list[str] = Field(description="the texts to score")


class TokenizeRequest(_RequestBody):
    """vLLM's /tokenize of a chat: how many tokens its prompt is, counted by the model (an anychat
    in front of this one, on its remote backend, compacts a long chat by this count)."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    def as_chat(self) -> ChatCompletionRequest:
        return ChatCompletionRequest(model=self.model, messages=self.messages, tools=self.tools,
                                     continue_final_message=self.continue_final_message, chat_template_kwargs=self.chat_template_kwargs)


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int | None


# ---- responses


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    # The prompt's first tokens found in the backend's cache (a chat's earlier turns), not read again.
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int) -> Usage:
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


class AssistantMessage(BaseModel):
    """``citations``, ``unknown_citations``: this server's extension, where the request's
    documents were answered from passages (``documents``): the passages the reply cites as [n],
    and the numbers it cites that name none given."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    citations: list[GivenPassage] | None = None
    unknown_citations: list[int] | None = None


class DocumentReport(BaseModel):
    """This server's extension: a document of the request too long for what was left of the
    model's context (``tokens`` > ``tokens_left``), answered from ``passages`` of it
    (``passage_tokens`` in all), numbered as the model read them; ``note`` says it in a line.
    ``read_whole``: the question was about all of it, so the passages are its outline (counted by
    the server) and the model's notes of each of its parts, not the parts most like the question."""

    name: str
    tokens: int
    tokens_left: int
    passage_tokens: int
    note: str
    passages: list[GivenPassage]
    read_whole: bool = False


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: ChatLogprobs | None = None
    # vLLM's extension, as its server names it: the stop string (of the request's stop) that ended the reply.
    stop_reason: str | None = None


class CompactionReport(BaseModel):
    """This server's extension: the conversation was made smaller to fit the model's context
    (context_policy). The model read ``message`` in place of the ``replaced`` messages from
    ``first_replaced`` on (counted in the request's messages), and ``shortened`` old reasoning
    blocks, tool results and documents cut to a note: send ``message`` in their place to go on
    from the same start (the server's prompt cache then keeps it). ``tokens_estimated``: the
    counts are estimates, as the model's server (remote) does not count prompts. ``summary_by``:
    the model that wrote the summary, where the server has one write them (--summary-model)."""

    policy: ContextPolicy
    first_replaced: int
    replaced: int
    message: dict[str, str]
    summary: str
    shortened: int
    prompt_tokens_before: int
    prompt_tokens_after: int
    freed_tokens: int
    tokens_estimated: bool = False
    summary_by: str | None = None

    @classmethod
    def of(cls, compaction: Compaction) -> CompactionReport:
        message = compaction.messages[compaction.at] if compaction.replaced else {}
        return cls(policy=compaction.policy, first_replaced=compaction.at, replaced=compaction.replaced,
                   message={"role": message["role"], "content": message["content"]} if message else {},
                   summary=compaction.summary, shortened=compaction.shortened, prompt_tokens_before=compaction.tokens_before,
                   prompt_tokens_after=compaction.tokens_after, freed_tokens=compaction.freed, tokens_estimated=compaction.estimated,
                   summary_by=compaction.written_by)


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    compaction: CompactionReport | None = None
    documents: list[DocumentReport] | None = None


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    citations: list[GivenPassage] | None = None
    unknown_citations: list[int] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    logprobs: ChatLogprobs | None = None
    stop_reason: str | None = None  # as Choice's, on the reply's last chunk


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    prompt_progress: PromptProgress | None = None
    compaction: CompactionReport | None = None
    documents: list[DocumentReport] | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "anychat"
    # What the model reads ("text", and "image", "video", "audio" where it reads them), as
    # OpenRouter lists it: a client (another anychat's remote backend) knows before it sends a file.
    # None for a model not loaded whose files do not say.
    input_modalities: list[str] | None = ["text"]
    max_model_len: int | None = None
    # False for a model a request may load (--load-on-demand), listed after those loaded.
    loaded: bool = True
    # What the model's prompt cache holds (conversations, memory_bytes, disk_bytes, hits), where it has one.
    prompt_cache: dict[str, int] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Score(BaseModel):
    object: Literal["score"] = "score"
    index: int
    score: float


class ScoreResponse(BaseModel):
    object: Literal["list"] = "list"
    model: str
    data: list[Score]
