"""How a conversation shows in the Chatbot: each turn (chat/turns.py) as its messages, with
thinking and tool calls as collapsible blocks, the passages a reply cites, and the ‹k/n› line
under a message that has other versions."""

from __future__ import annotations

import json
import re
from typing import Any

from chat.approval import question_key
from chat.browser_python import code_key
from chat.long_documents import Reading
from chat.turns import SavedToolCall, SummaryNote, Turn
from engines import PromptRead
from library.citations import cited
from library.fitting import GivenPassage
from store import MessageTree

from .attachments import chip
from .inert_markdown import as_written, inert
from .languages import said
from .tool_approval import question_line
from .versions import version_line


def _reading_line(read: PromptRead) -> dict:
    cached = said("conversation.reading_cached", cached=f"{read.cached:,}") if read.cached else ""
    return {"role": "assistant", "content": said("conversation.reading", read=f"{read.read:,}", total=f"{read.total:,}", cached=cached),
            "metadata": {"title": said("conversation.reading_title", share=f"{read.read / read.total:.0%}"), "status": "pending"}}


def document_line(reading: Reading) -> dict[str, Any]:
    """The pending line under the conversation while a document of the message is read before the reply."""
    if reading.kind == "whole":
        return {"role": "assistant", "content": said("conversation.reading_whole", name=reading.name, done=reading.done, total=reading.total),
                "metadata": {"title": said("conversation.reading_whole_title"), "status": "pending"}}
    counted = said("conversation.passages_read", done=f"{reading.done:,}", total=f"{reading.total:,}") if reading.total else ""
    return {"role": "assistant", "content": said("conversation.reading_passages", name=reading.name, counted=counted),
            "metadata": {"title": said("conversation.reading_document"), "status": "pending"}}


def render_turn(tree: MessageTree[Turn], place: int) -> list[dict[str, Any]]:
    """The Chatbot messages for the turn at ``place``: thinking and tool calls as collapsible
    blocks, the passages a reply cites, and under a message that has other versions, which one it is."""
    line = version_line(place, tree.versions(place))
    return _messages(tree.messages[place], asked_passages(tree, place)) + ([line] if line else [])


def asked_passages(tree: MessageTree[Turn], place: int) -> list[GivenPassage]:
    """The passages of long documents the model was given with the message that the reply at
    ``place`` answers (none for a user message): what its citations name."""
    if tree.messages[place].role != "assistant":
        return []
    asked = next((tree.messages[p] for p in reversed(tree.branch(place)[:-1]) if tree.messages[p].role == "user"), None)
    return [passage for document in (asked.documents if asked else []) for passage in document.passages]


def _messages(turn: Turn, given: list[GivenPassage] = ()) -> list[dict[str, Any]]:
    if turn.role == "user":
        content: list[Any] = [{"path": path} for path in turn.files] + [chip(document) for document in turn.documents]
        if turn.content:
            content.append(inert(turn.content))
        missing = inert(", ".join(turn.missing_files))
        # A message whose only files are gone still needs something to show.
        shown = [{"role": "user", "content": content or [f"📎 {missing}"]}]
        if missing:
            shown.append({"role": "assistant", "content": said("conversation.missing", missing=missing),
                          "metadata": {"title": said("conversation.missing_files" if len(turn.missing_files) > 1 else "conversation.missing_file")}})
        if turn.error:
            shown.append({"role": "assistant", "content": inert(turn.error), "metadata": {"title": said("conversation.could_not_answer")}})
        return shown
    if turn.summary is not None:
        return [_summary_block(turn)]
    if turn.compacting:
        return [{"role": "assistant", "content": said("conversation.summarizing" if turn.compacting.policy == "compact" else "conversation.leaving_out",
                                                      tokens=f"{turn.compacting.tokens:,}", count=turn.compacting.replacing),
                 "metadata": {"title": said("conversation.compacting"), "status": "pending"}}]
    if turn.waiting:
        return [{"role": "assistant", "content": said("conversation.waiting", ahead=turn.waiting),
                 "metadata": {"title": said("conversation.in_line"), "status": "pending"}}]
    shown = []
    for step in turn.steps:
        shown += _answer(step.reasoning, step.content, thinking=False)
        shown += [_call_block(call, running=turn.writing, asking=call.id in turn.asking) for call in step.tool_calls]
        if turn.writing and not turn.asking:
            shown += [_browser_run(call) for call in step.tool_calls if call.name == "python" and call.result is None]
    if turn.asking:
        shown.append(question_line(question_key(turn.asking), [call.name for call in turn.steps[-1].tool_calls if call.id in turn.asking]))
    if turn.reading:
        shown.append(_reading_line(turn.reading))
    shown += _answer(turn.reasoning, turn.content, thinking=turn.writing and not (turn.content or turn.tool_text or turn.tool_calls))
    shown += [_call_block(call, running=False) for call in turn.tool_calls]
    if turn.step_limit:
        shown.append({"role": "assistant", "metadata": {"title": said("conversation.step_limit_title")},
                      "content": said("conversation.step_limit_one" if turn.step_limit == 1 else "conversation.step_limit", count=turn.step_limit)})
    if turn.tool_text:
        shown.append({"role": "assistant", "content": fenced(turn.tool_text.strip()),
                      "metadata": {"title": said("conversation.a_tool_call"), "status": "pending"}})
    if turn.writing:  # a continued reply's earlier stats cover less than it will hold
        return shown
    sources, unknown = cited(turn.content, given) if given else ([], [])
    if sources or unknown:
        shown.append(_sources_block(sources, unknown))
    if turn.stats:
        shown.append({"role": "assistant", "content": f'<span class="reply-stats">{turn.stats.line()}</span>'})
    elif turn.stopped:  # cut short by an error, or stopped in a file exported before replies had stats
        shown.append({"role": "assistant", "content": "*■ Stopped*"})
    return shown


def _sources_block(sources: list[GivenPassage], unknown: list[int]) -> dict[str, Any]:
    """The passages a reply cites, collapsed under their numbers: opening it shows each one as the
    model read it, where it is. Numbers it cites that name no passage given are said, not linked."""
    numbers = " ".join(f"[{passage.number}]" for passage in sources)
    parts = [f"**[{passage.number}] {inert(passage.label())}**\n\n{inert(passage.text)}" for passage in sources]
    if unknown:
        named = ", ".join(f"[{number}]" for number in unknown)
        parts.append(said("conversation.no_such_passage", numbers=named))
    title = said("conversation.sources_numbered", numbers=numbers) if numbers else said("conversation.sources")
    return {"role": "assistant", "content": "\n\n".join(parts), "metadata": {"title": title, "status": "done"}}


def _summary_block(turn: Turn) -> dict[str, Any]:
    """A summary turn, shown whole and marked: what it replaced, and where those messages are."""
    note = turn.summary
    body = inert(turn.content.strip()) if turn.content.strip() else said("conversation.not_sent", count=note.replaced)
    return {"role": "assistant", "content": f"{_summary_header(note)}{body}"}


def _summary_header(note: SummaryNote) -> str:
    return f'<span class="chat-summary">📝 **{note.title()}** ({note.tokens()}; the arrows ‹ › under it show them)</span>\n\n'


def edited_reply(turn: Turn, shown: str, edited: str) -> Turn | None:
    """The new version of an assistant ``turn`` whose message ``shown`` in the Chatbot (its text,
    as the user would have written it: handlers.edited_text) the user edited to ``edited``: its text, or its summary's (the mark above it left out, as the user may
    have left it in); None where what was edited is not the text (its thinking, a tool call, its
    stats line)."""
    if turn.summary is not None:
        header = _summary_header(turn.summary)
        text = edited.removeprefix(header).split("</span>", 1)[-1] if edited.startswith('<span class="chat-summary">') else edited
        # A note of messages left out that the user writes a summary into is a summary now.
        note = turn.summary.model_copy(update={"policy": "compact"}) if text.strip() else turn.summary
        return turn.model_copy(update={"content": text.strip(), "summary": note}, deep=True)
    if shown != as_written(inert(turn.content.strip())) or not turn.content.strip():
        return None
    return turn.model_copy(update={"content": edited, "stats": None, "stopped": False}, deep=True)


def _answer(reasoning: str, content: str, thinking: bool) -> list[dict[str, Any]]:
    """What the model wrote in one answer: its reasoning, collapsed (``thinking``: still being written), and its text."""
    shown = []
    if reasoning:
        shown.append({"role": "assistant", "content": inert(reasoning.strip()) or "…",
                      "metadata": {"title": said("conversation.thinking"), "status": "pending" if thinking else "done"}})
    if content.strip():
        shown.append({"role": "assistant", "content": inert(content.strip())})
    return shown


def _call_block(call: SavedToolCall, running: bool, asking: bool = False) -> dict[str, Any]:
    """A tool call as a collapsible block: its arguments, and for a call that ran here its
    result or error (as text: a tool's output is never taken for the page's HTML) and time.
    ``running``: the call is of an answer whose calls run now (one that does not run here, the
    user's to answer, is a call only); ``asking``: it waits for the user's say first."""
    body = _arguments_block(call.arguments)
    name = inert(call.name)
    took = {"duration": call.seconds} if call.seconds is not None else {}
    if call.error is not None:
        body += f"\n\n**{said('conversation.error')}**\n\n{fenced(call.error)}"
        return {"role": "assistant", "content": body, "metadata": {"title": said("conversation.call_failed", name=name), "status": "done", **took}}
    if call.result is not None:
        body += f"\n\n**{said('conversation.result')}**\n\n{fenced(call.result)}"
        return {"role": "assistant", "content": body, "metadata": {"title": f"⚙ {name}", "status": "done", **took}}
    if asking:
        return {"role": "assistant", "content": body, "metadata": {"title": said("conversation.call_asks", name=name), "status": "pending"}}
    if running:
        return {"role": "assistant", "content": body, "metadata": {"title": said("conversation.call_running", name=name), "status": "pending"}}
    return {"role": "assistant", "content": body, "metadata": {"title": said("conversation.call", name=name), "status": "done"}}


def _browser_run(call: SavedToolCall) -> dict[str, Any]:
    """The code of a ``python`` call that waits for the user to run it in the page's browser,
    marked with its key (webui/python_in_browser.py)."""
    try:
        code = str(json.loads(call.arguments).get("code", ""))
    except (json.JSONDecodeError, AttributeError):
        code = ""
    return {"role": "assistant", "content": f'<span class="browser-run k-{code_key(code)}">{said("conversation.run_in_browser")}</span>\n\n{fenced(code, "python")}'}


def _arguments_block(arguments: str) -> str:
    try:
        return fenced(json.dumps(json.loads(arguments), indent=2, ensure_ascii=False), "json")
    except json.JSONDecodeError:
        return fenced(arguments)


def fenced(text: str, language: str = "") -> str:
    """``text`` as a code block, shown as it is: its fence longer than any run of backticks in it, so that it cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def render(tree: MessageTree[Turn], places: list[int] | None = None) -> list[dict[str, Any]]:
    """The Chatbot messages for the turns at ``places`` (by default the branch shown)."""
    return [message for place in (tree.branch() if places is None else places) for message in render_turn(tree, place)]


def turn_of_message(tree: MessageTree[Turn], message_index: int) -> int:
    """The place of the turn a Chatbot message index belongs to (a turn may show as several messages)."""
    shown = 0
    for place in tree.branch():
        shown += len(render_turn(tree, place))
        if message_index < shown:
            return place
    raise IndexError(f"No message {message_index} in this conversation.")
