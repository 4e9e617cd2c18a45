"""A conversation's turns: what each message keeps, and what the model is sent of them. A
tab's turns stand in a MessageTree (every version of every message, the branch shown) held by its
ChatSession (chat/session.py); how they show in the page is webui/chat_view.py's."""

from __future__ import annotations

import mimetypes
import os
from typing import Any, Literal

from pydantic import BaseModel, Field

from engines import ChatError, ConfigError, PromptRead, ToolCall
from engines.compaction import Compacting, freed_note, replaced_note, summary_message
from engines.context_settings import ContextPolicy
from engines.prompt.media import MEDIA_EXTENSIONS
from engines.reply_format import ReplyFormatChoice
from engines.request import MEDIA_KINDS, PLACEHOLDERS, ChatRequest, parse_tools
from tools import Tool

from .documents import AttachedDocument
from .reply_stats import ReplyStats


class SavedToolCall(BaseModel):
    """A call the model wrote; where it ran here (a tool the chat runs), what it gave the model:
    ``result``, and ``error`` where it failed, after ``seconds``."""

    id: str
    name: str
    arguments: str
    result: str | None = None
    error: str | None = None
    seconds: float | None = None

    def for_template(self) -> dict[str, Any]:
        return ToolCall(self.name, self.arguments, self.id).for_template()

    def result_for_template(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.id, "name": self.name, "content": self.result or ""}


class ToolStep(BaseModel):
    """One answer of a reply that ran tools, before the reply's last: what the model wrote, and
    the calls it made, each with its result."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[SavedToolCall] = []


class SummaryNote(BaseModel):
    """An assistant turn that stands for earlier messages of the chat, summarized (its content)
    or left out to fit the model's context (engines/compaction.py): how many it replaced, and the
    prompt's tokens before and after (``estimated`` where the model's server does not count them),
    and the model that wrote it where it is not the chat's own (``written_by``). The messages it
    replaced are the other version beside it (‹1/2›)."""

    policy: ContextPolicy
    replaced: int
    tokens_before: int
    tokens_after: int
    estimated: bool = False
    written_by: str | None = None

    def title(self) -> str:
        return replaced_note(self.policy, self.replaced, self.written_by)

    def tokens(self) -> str:
        return freed_note(self.tokens_before, self.tokens_after, self.estimated)


class Turn(BaseModel):
    """One message as the conversation keeps it. An assistant turn keeps its reply as the
    parser read it: ``reasoning``, ``content`` and ``tool_calls``. ``error`` on a user turn says
    why the model could not answer it, and such a turn is not sent to the model again until
    regenerated. ``documents`` are the documents attached to a user turn, as text. ``steps``:
    a reply that ran tools holds its answers before the last there, each with its calls and their
    results (tools/agent_loop.py); ``step_limit``, where it stopped at its limit of
    answers with calls, that limit. ``stats`` says how a finished reply was written. ``missing_files`` names the files
    that the server no longer has (shown as missing, not sent). ``writing``,
    ``tool_text``, ``waiting`` (how many requests must finish before this reply starts) and
    ``asking`` (the calls that wait for the user's say: chat/approval.py) and ``compacting``
    (the conversation is being made smaller to fit) exist only while the reply streams. ``summary``: the turn is a summary of earlier messages (SummaryNote). Where it stands among the chat's messages (what it follows, its
    versions) is its place in the session's MessageTree (chat/session.py)."""

    role: Literal["user", "assistant"]
    content: str = ""
    files: list[str] = []
    documents: list[AttachedDocument] = []
    missing_files: list[str] = []
    error: str | None = None
    reasoning: str = ""
    tool_calls: list[SavedToolCall] = []
    steps: list[ToolStep] = []
    step_limit: int | None = None
    stopped: bool = False
    stats: ReplyStats | None = None
    summary: SummaryNote | None = None
    writing: bool = Field(False, exclude=True)
    tool_text: str = Field("", exclude=True)
    waiting: int | None = Field(None, exclude=True)
    reading: PromptRead | None = Field(None, exclude=True)
    compacting: Compacting | None = Field(None, exclude=True)
    asking: list[str] = Field([], exclude=True)



def media_kind(path: str) -> str | None:
    """"image", "video" or "audio" for an uploaded file, from its name (None for anything else)."""
    lower = path.lower()
    for kind, extensions in MEDIA_EXTENSIONS.items():
        if lower.endswith(extensions):
            return kind
    mime = mimetypes.guess_type(path)[0] or ""
    kind = mime.split("/")[0]
    return kind if kind in MEDIA_EXTENSIONS else None


def kept_media(turn: Turn, media_root: str | None = None) -> Turn:
    """The turn with the files the server still has; others are named as missing (shown so,
    never read): gone (the page's files are kept for a while only) or, where ``media_root`` is
    given, not a file the page stored there (a saved chat's copy in the browser can be edited,
    and a path elsewhere on the server is never shown or read)."""
    root = os.path.realpath(media_root) + os.sep if media_root else ""
    # isfile first: it is false for what realpath cannot take (a NUL byte in the path).
    kept = [path for path in turn.files if os.path.isfile(path) and os.path.realpath(path).startswith(root)]
    gone = [os.path.basename(path) for path in turn.files if path not in kept]
    return turn.model_copy(update={"files": kept, "missing_files": turn.missing_files + gone}, deep=True)


def model_request(turns: list[Turn], system: str | None = None, tools: str | None = None, user: str | None = None,
                  reply_format: str = "text", reply_schema: str = "", continue_final_message: bool = False,
                  running: tuple[Tool, ...] = (), **generation: Any) -> ChatRequest:
    """The request for the model: the conversation, each file with its placeholder in the
    message it was attached to (so the model sees it where the user put it), then the text of its
    documents, each named, before what the user wrote; earlier replies as their answers, tool
    calls and the results of those that ran, without their reasoning, and the tab's settings
    (``reply_format`` and ``reply_schema`` as in ReplyFormatChoice). ``tools``: the function
    schemas the user declared (JSON text), offered beside those of the tools ``running`` here.
    ``user``: whom it counts for in the model's waiting line; ``continue_final_message``: the last
    reply is to be written on."""
    chosen_format = ReplyFormatChoice.build(reply_format=reply_format, reply_schema=reply_schema or "").chosen()
    media: dict[str, list[str]] = {kind: [] for kind in MEDIA_KINDS}
    messages = [message for turn in turns for message in turn_messages(turn, media)]
    return ChatRequest.build(messages, system=system or None, tools=offered_tools(tools, running), media=media, user=user,
                             response_format=chosen_format, continue_final_message=continue_final_message, **generation)


def turn_messages(turn: Turn, media: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The messages the model is sent for one turn (none for a user turn it could not answer),
    its files added to ``media``."""
    if turn.role == "user" and turn.error:
        return []
    if turn.summary is not None:
        return [summary_message(turn.content, turn.summary.replaced, turn.summary.policy)]
    messages: list[dict[str, Any]] = []
    if turn.role == "assistant":
        for step in turn.steps:
            messages.append({"role": "assistant", "content": step.content, "tool_calls": [call.for_template() for call in step.tool_calls]})
            messages += [call.result_for_template() for call in step.tool_calls]
        if turn.content or turn.tool_calls:
            calls = {"tool_calls": [call.for_template() for call in turn.tool_calls]} if turn.tool_calls else {}
            messages.append({"role": "assistant", "content": turn.content, **calls})
        return messages
    tags = ""
    for path in turn.files:
        kind = media_kind(path)
        if kind is None:
            raise ChatError(f"{os.path.basename(path)} is not an image, video, audio or document file; remove it.")
        media[kind].append(path)
        tags += PLACEHOLDERS[kind]
    texts = [document.for_model() for document in turn.documents] + ([turn.content] if turn.content else [])
    return [{"role": "user", "content": tags + "\n\n".join(texts)}]


def offered_tools(declared: str | None, running: tuple[Tool, ...]) -> list[dict[str, Any]] | None:
    """The function schemas the user declared, and those of the tools that run here; a ConfigError
    where a declared one takes the name of one that runs."""
    schemas = parse_tools(declared) or []
    names = {tool.name for tool in running}
    clashing = [schema.get("function", schema)["name"] for schema in schemas if schema.get("function", schema)["name"] in names]
    if clashing:
        raise ConfigError(f"The function schemas declare {', '.join(clashing)}, the name of a tool that runs here: rename the schema, "
                        "or turn the tool off under Tools that run.")
    return [*schemas, *(tool.schema() for tool in running)] or None


def copied(turn: Turn) -> Turn:
    return turn.model_copy(deep=True)
