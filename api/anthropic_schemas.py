"""Anthropic's Messages API shapes (POST /v1/messages, /v1/messages/count_tokens), as its
official SDK sends and reads them: what Claude Code and many agent frameworks speak.

Fields that do not change what a local model writes (``cache_control`` on any block, ``metadata``,
``service_tier``, ``citations`` settings, a thinking block's ``signature``) are taken and
ignored, as Anthropic's own semantics allow; fields that would (a ``container``, ``mcp_servers``,
files by ``file_id``) are refused with a 400 that says so (api/anthropic_messages.py). A request
body's other fields are taken and ignored too: Anthropic adds beta fields often, and a client
that sends one should not break on a local server."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engines.generation_args import GenerationArgs
from engines.settings import field_range


class _Block(BaseModel):
    # cache_control, citations and the like: accepted on any block, and change nothing here.
    # Strict types, as Anthropic's API has them: "5" is no integer, 2.5 no count.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class Base64Source(_Block):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Block):
    type: Literal["url"]
    url: str


class TextSource(_Block):
    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


class FileSource(_Block):
    type: Literal["file"]
    file_id: str


class ContentSource(_Block):
    type: Literal["content"]
    content: str | list[dict[str, Any]]


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class ImageBlock(_Block):
    type: Literal["image"]
    source: Annotated[Base64Source | URLSource | FileSource, Field(discriminator="type")]


class DocumentBlock(_Block):
    type: Literal["document"]
    source: Annotated[Base64Source | TextSource | URLSource | FileSource | ContentSource, Field(discriminator="type")]
    title: str | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool = False


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


InputBlock = Annotated[TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
                       Field(discriminator="type")]


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["user", "assistant"]
    content: str | list[InputBlock]


class ToolDefinition(_Block):
    """A client tool (type "custom" or none), or one of Anthropic's server tools ("web_search_…",
    "bash_…"), which this server does not run and leaves out (the response's header says which)."""

    type: str | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(_Block):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(_Block):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None


class OutputFormat(_Block):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Block):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


def _setting(name: str, default: Any = None) -> Any:
    setting = GenerationArgs.model_fields[name]
    return Field(default, description=setting.description, **field_range(setting))


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    # Refused where given (api/anthropic_messages.py): they would change the reply, and this server has neither.
    container: Any = None
    mcp_servers: Any = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = _setting("max_new_tokens", default=...)
    temperature: float | None = _setting("temperature")
    top_p: float | None = _setting("top_p")
    top_k: int | None = _setting("top_k")
    stop_sequences: list[str] | None = None
    stream: bool = False


# ---- responses


class ResponseText(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ResponseThinking(BaseModel):
    """The model's reasoning, only ever here (never inside a text block). ``signature`` is
    Anthropic's proof that it wrote it; a local model has none to give."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ResponseToolUse(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ResponseBlock = ResponseThinking | ResponseText | ResponseToolUse
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class MessagesUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    # The prompt's first tokens found in the backend's cache (a chat's earlier turns), not read again.
    cache_read_input_tokens: int = 0


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ResponseBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessagesUsage


class TokenCount(BaseModel):
    input_tokens: int


class ModelInfo(BaseModel):
    """A model as Anthropic's GET /v1/models lists it (for a request with an ``anthropic-version`` header)."""

    type: Literal["model"] = "model"
    id: str
    display_name: str
    # Anthropic's value for a release date not known.
    created_at: str = "1970-01-01T00:00:00Z"
    lifecycle: Literal["active"] = "active"


class ModelInfoList(BaseModel):
    data: list[ModelInfo]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None
