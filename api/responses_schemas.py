"""OpenAI's Responses API shapes (POST /v1/responses, GET and DELETE /v1/responses/{id}), as
the official SDK sends them: what Codex CLI and the Agents SDK speak. Request bodies are checked
strictly, as Chat Completions' are; an input item's fields this server has no use for (an id, a
status) are taken and ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.generation_args import GenerationArgs
from engines.settings import field_range

from .schemas import _RequestBody


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class InputText(_Item):
    type: Literal["input_text"]
    text: str


class InputImage(_Item):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(_Item):
    type: Literal["input_file"]
    file_data: str | None = None
    filename: str | None = None
    file_id: str | None = None
    file_url: str | None = None


class OutputText(_Item):
    type: Literal["output_text"]
    text: str


class Refusal(_Item):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[InputText | InputImage | InputFile | OutputText | Refusal, Field(discriminator="type")]


class MessageItem(_Item):
    type: Literal["message"]
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


class SummaryText(_Item):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Item):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Item):
    """An earlier reply's reasoning: its text, where given (``content``, else ``summary``); an
    ``encrypted_content`` alone is OpenAI's, which no local model reads."""

    type: Literal["reasoning"]
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None


InputItem = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem, Field(discriminator="type")]


class FunctionTool(_Item):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ReasoningConfig(_Item):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class TextConfig(_Item):
    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


def _setting(name: str) -> Any:
    setting = GenerationArgs.model_fields[name]
    return Field(None, description=setting.description, **field_range(setting))


class ResponsesRequest(_RequestBody):
    model: str
    input: str | list[InputItem] = Field(description="the new input: text, or items (messages, function calls and their outputs)")
    instructions: str | None = None
    previous_response_id: str | None = Field(None, description="go on from this response, kept by this server (store: true)")
    store: bool = Field(True, description="keep the response for a later request to go on from, and to read back")
    stream: bool = False
    # Tools of type function are offered to the model, and those of a namespace; others are left
    # out with a warning in the response (api/responses.py).
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = _setting("max_new_tokens")
    temperature: float | None = _setting("temperature")
    top_p: float | None = _setting("top_p")
    truncation: Literal["auto", "disabled"] | None = Field(None, description="auto: the oldest turns dropped where the conversation "
                                                                             "is longer than the context; disabled: refused")
    # Accepted and ignored, as they do not change the reply.
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[str] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    top_logprobs: int | None = None
    max_tool_calls: int | None = None
    # Declared so that they can be refused with a reason (api/responses.py).
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _messages_typed(cls, data: Any) -> Any:
        # A message item may leave out its type ("easy input message"): it is one where it has a role.
        if isinstance(data, dict) and isinstance(data.get("input"), list):
            data = {**data, "input": [{"type": "message", **item} if isinstance(item, dict) and "type" not in item and "role" in item
                                      else item for item in data["input"]]}
        return data


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True
