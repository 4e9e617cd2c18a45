"""Tools that run (issue 34): the built-in tools, one call's checks, the agent loop on the real
embedded model (a forced tool_choice makes its call certain), in the page's handlers, saved with
the chat, and in the terminal chat. The loop on every backend: harness/engine_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time

import pytest
from gradio.utils import get_upload_folder

from chat import approval
from chat.approval import question_key
from chat.conversation_file import read_conversation, write_conversation
from chat.saved_chats import SavedChats
from chat.session import ChatSession
from chat.turns import SavedToolCall, ToolStep, Turn, model_request
from engines import ChatModel, ChatRequest, ConfigError, LoadedModels, Response
from engines.prompt.reply_parser import ToolCall
from limits import Limits
from store import MessageTree, open_store
from tests.page_input import CONTROLS, message, run, settings
from tools import BUILTIN_TOOLS, DENIED, StepLimitReached, Tool, ToolResult, ToolSettings, ToolsRunning, reply_with_tools, run_call
from tools import agent_loop
from tools.agent_loop import fit_results
from tools.calculator import MOST_DIGITS, CalculatorError, calculate
from webui.chat_view import render
from webui.handlers import ChatHandlers
from webui.markdown_export import write_markdown
from webui.notices import toast

QUESTION = [{"role": "user", "content": "What is 17 times 23? Use the calculator."}]
FORCED = {"tool_choice": {"type": "function", "function": {"name": "calculator"}}}
# The tools that run on the server (python runs in a page's browser: tests/test_browser.py).
SERVER_TOOLS = {name: BUILTIN_TOOLS[name] for name in ("calculator", "current_time")}


@pytest.fixture(scope="module")
def model():
    with ChatModel({"infer_backend": "llamacpp", "temperature": 0, "max_new_tokens": 40}) as model:
        yield model


# ---- the built-in tools and one call


@pytest.mark.parametrize("expression, value", [
    ("17 * 23", "391"), ("(3 + 4.5) * 2", "15.0"), ("sqrt(16) + 2**10", "1028.0"), ("round(pi, 3)", "3.142"), ("7 // 2 + 7 % 2", "4"),
    ("max(1, 2, 3) - min(4, 5)", "-1"), ("10**4", "10000"),
])
def test_the_calculator_computes(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression, why", [
    ("9**9**9", f"more than {MOST_DIGITS} digits"),
    ("10**3999 * 10**3999", f"more than {MOST_DIGITS} digits"),
    ("1 << 100000000", "an operator this calculator lacks"),
    ("'a' * 100000000", "takes real numbers only"),
    ("(1).__class__", "not an expression this calculator takes"),
    ("__import__('os').system('true')", "not an expression this calculator takes"),
    ("open('/etc/passwd')", "not an expression this calculator takes"),
    ("1/0", "has no value: division by zero"),
    ("x + 1", "not an expression this calculator takes"),
    ("1" * 1001, "at most 1000"),
])
def test_the_calculator_refuses_what_would_hold_the_server_or_run_code(expression, why):
    started = time.perf_counter()
    with pytest.raises(CalculatorError, match=why):
        calculate(expression)
    assert time.perf_counter() - started < 1


async def test_a_call_runs_once_its_arguments_fit_and_a_failure_is_a_result_the_model_reads():
    calculator = BUILTIN_TOOLS["calculator"]
    done = await run_call(calculator, ToolCall("calculator", '{"expression": "6*7"}'))
    assert (done.content, done.error) == ("42", None) and done.seconds > 0
    for arguments, why in (('{"expression": 6}', "expression: 6 is not of type 'string'"),
                           ('{"expr": "1"}', "'expression' is a required property"),
                           ("not json", "not JSON"), ('["6*7"]', "must be a JSON object"),
                           ('{"expression": "1/0"}', "division by zero")):
        failed = await run_call(calculator, ToolCall("calculator", arguments))
        assert why in failed.error and failed.content == f"Error: {failed.error}", arguments

    async def broken(arguments):
        raise RuntimeError("the disk is gone")

    failed = await run_call(Tool("broken", "", {"type": "object"}, broken), ToolCall("broken", "{}"))
    assert failed.error == "the disk is gone"


async def test_the_time_is_given_in_the_zone_named_and_an_unknown_zone_is_said():
    now = await run_call(BUILTIN_TOOLS["current_time"], ToolCall("current_time", '{"timezone": "Asia/Tokyo"}'))
    assert "UTC+0900" in now.content and now.error is None
    for zone in ("Mars/Olympus", "Europe"):  # Europe: a folder of zones, whose error named the server's path to it
        unknown = await run_call(BUILTIN_TOOLS["current_time"], ToolCall("current_time", json.dumps({"timezone": zone})))
        assert unknown.error.startswith(f"{zone!r} is not a time zone this server knows") and "zoneinfo" not in unknown.error


def test_tool_settings_name_only_tools_that_exist(tool_catalog):
    assert ToolSettings.split({"run_tools": ["calculator"], "temperature": 0.5}, tool_catalog) == (ToolSettings(run_tools=["calculator"]), {"temperature": 0.5})
    with pytest.raises(ConfigError, match=r"run_tools names no tool here: rm \(the tools: calculator, current_time, python\)"):
        ToolSettings.build_for(tool_catalog, run_tools=["rm"])


# ---- the loop, on the real model


async def replies(model, request, tools, **options):
    return [item async for item in reply_with_tools(model, request, tools, **options)]


@pytest.mark.slow
async def test_a_called_tool_runs_and_the_model_answers_with_its_result(model):
    request = ChatRequest.build(QUESTION, tools=[tool.schema() for tool in SERVER_TOOLS.values()], **FORCED)
    items = await replies(model, request, SERVER_TOOLS, step_limit=2)
    answers = [item for item in items if isinstance(item, Response)]
    [running] = [item for item in items if isinstance(item, ToolsRunning)]
    [result] = [item for item in items if isinstance(item, ToolResult)]
    [call] = running.calls
    assert call.name == "calculator" and answers[0].parts.tool_calls == (call,)
    expected = await run_call(BUILTIN_TOOLS["calculator"], call)
    assert (result.call, result.content, result.error) == (call, expected.content, expected.error)
    assert items.index(running) < items.index(result) < items.index(answers[1])
    # The second answer read the first one's call and the result: its prompt holds both.
    assert answers[1].prompt_length >= answers[0].prompt_length + model.count_tokens(result.content)
    assert len(answers) == 2 and (answers[1].parts.tool_calls == () or isinstance(items[-1], StepLimitReached))


async def test_a_call_of_a_tool_that_does_not_run_here_ends_the_loop(model):
    declared = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    request = ChatRequest.build(QUESTION, tools=[declared, BUILTIN_TOOLS["calculator"].schema()],
                                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    items = await replies(model, request, SERVER_TOOLS)
    assert isinstance(items[-1], Response) and items[-1].parts.tool_calls[0].name == "get_weather"
    assert not [item for item in items if isinstance(item, ToolsRunning | ToolResult)], "the user answers it, not the loop"


async def test_the_step_limit_ends_a_loop_that_keeps_calling(model):
    calls = []

    async def counted(arguments):
        calls.append(arguments)
        return "Call me again."

    again = Tool("again", "Always call this again.", {"type": "object", "properties": {}}, counted)
    # A schema that is a call of `again` holds every answer to one: the loop runs until its limit.
    request = ChatRequest.build(QUESTION, tools=[again.schema()], response_format={"type": "json_schema", "json_schema": {
        "name": "call", "schema": {"type": "object", "properties": {"name": {"const": "again"}, "arguments": {"type": "object", "properties": {},
                                                                                                              "additionalProperties": False}},
                                   "required": ["name", "arguments"], "additionalProperties": False}}})
    items = await replies(model, request, {"again": again}, step_limit=3)
    assert len(calls) == 2 and items[-1] == StepLimitReached(3)
    assert len([item for item in items if isinstance(item, Response)]) == 3


async def test_stop_cancels_a_running_tool_within_a_second(model):
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(arguments):
        running.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    request = ChatRequest.build(QUESTION, tools=[BUILTIN_TOOLS["calculator"].schema()], **FORCED)
    tools = {"calculator": Tool("calculator", "", BUILTIN_TOOLS["calculator"].parameters, slow)}

    async def answer():
        async with contextlib.aclosing(reply_with_tools(model, request, tools)) as items:
            async for _ in items:
                pass

    reply = asyncio.create_task(answer())
    # Waited for in the tool itself: the call's arguments are checked in a forked child first,
    # which takes a while under load, and stopped before then there is no running tool to cancel.
    await asyncio.wait_for(running.wait(), 120)
    stopped = time.perf_counter()
    reply.cancel()
    await asyncio.gather(reply, return_exceptions=True)
    await asyncio.wait_for(cancelled.wait(), 1)
    assert time.perf_counter() - stopped < 1


def test_a_result_too_long_for_the_context_is_cut_with_a_note(model):
    answer = {"role": "assistant", "content": "", "tool_calls": [ToolCall("calculator", "{}", "c1").for_template()]}
    asked = ChatRequest(messages=[*QUESTION, answer], generation={"max_new_tokens": 40})
    huge = "word " * 2_000_000  # 10 MB
    [cut] = fit_results(model, asked, [ToolResult(ToolCall("calculator", "{}", "c1"), huge)])
    assert "characters were left out, as the whole would not fit the model's context" in cut.content
    assert len(cut.content) < len(huge)
    whole = ChatRequest(messages=[*asked.messages, cut.for_template()], generation={"max_new_tokens": 40})
    assert model.count_tokens(model.render_prompt(whole)) + 40 <= model.context_length
    short = ToolResult(ToolCall("calculator", "{}", "c1"), "391")
    assert fit_results(model, asked, [short]) == [short], "a result that fits is left whole"


# ---- in the page


@pytest.fixture
def handlers(model):
    return ChatHandlers(LoadedModels(model), CONTROLS)


def with_tools(**tools):
    return {**settings(40), "run_tools": ["calculator"], "tool_choice": "required", "tool_steps": 2, **tools}


async def test_the_page_runs_the_chats_tools_and_shows_each_call_with_its_result(handlers, tmp_path, upload_folder):
    store = open_store(f"sqlite:///{tmp_path / 'chats.db'}")
    chats = SavedChats(store, "browser:" + "a" * 32, "a" * 32, upload_folder=get_upload_folder(), tell=toast)
    session = chats.new_session()
    updates = await run(handlers.send(session, message("What is 17 times 23?"), **with_tools()))
    reply = session.turns[1]
    [call] = reply.steps[0].tool_calls
    expected = await run_call(BUILTIN_TOOLS["calculator"], ToolCall(call.name, call.arguments))
    assert (call.name, call.result, call.error) == ("calculator", expected.content, expected.error) and call.seconds > 0
    shown = updates[-1]["chatbot"]
    block = next(m for m in shown if m.get("metadata", {}).get("title", "").startswith(("⚙ calculator", "⚠ calculator failed")))
    assert ("**Result**" if call.error is None else "**Error**") in block["content"] and block["metadata"]["status"] == "done"
    assert reply.stats is not None and reply.stats.tokens > 1
    # Kept with the chat, as it is shown: opened again, and through a conversation file and Markdown.
    chats.keep(session, session.chat_id, "", "")
    again = chats.open(session.chat_id, str(upload_folder))
    assert again.turns[1].steps == reply.steps and again.turns[1].content == reply.content
    exported = tmp_path / "chat.json"
    write_conversation(str(exported), session.tree, "", 10**7)
    assert read_conversation(str(exported), Limits(), str(upload_folder)).tree.shown_messages()[1].steps == reply.steps
    write_markdown(str(tmp_path / "chat.md"), session.tree, "", 10**7)
    markdown = (tmp_path / "chat.md").read_text()
    assert "**Tool call** `calculator`" in markdown and ("**Result**" if call.error is None else "**Error**") in markdown
    # The next request gives the model the call and its result.
    request = model_request(session.turns + [Turn(role="user", content="Thanks.")], running=(BUILTIN_TOOLS["calculator"],))
    roles = [m["role"] for m in request.messages]
    assert roles[:3] == ["user", "assistant", "tool"] and roles[-1] == "user"
    assert request.messages[2] == {"role": "tool", "tool_call_id": call.id, "name": "calculator", "content": call.result}
    store.close()


async def answered(replying, session: ChatSession, choice: str) -> list[list[dict]]:
    """The Chatbot as each question of the reply showed it, each answered with ``choice`` as its link does."""
    asked = []
    async for update in replying:
        turn = session.turns[-1]
        if turn.asking and session.reply.question is not None and not session.reply.question.answer.done():
            asked.append(update["chatbot"])
            approval.answer(session, f"{choice} {question_key(turn.asking)} 1700000000000")
    return asked


@pytest.mark.slow
async def test_a_tool_that_may_change_something_asks_first_and_runs_only_as_allowed(handlers, monkeypatch):
    notes = []

    async def keep_note(arguments):
        notes.append(arguments["text"])
        return f"noted ({len(notes)})"

    monkeypatch.setitem(BUILTIN_TOOLS, "note", Tool("note", "Keep a note for the user.", {"type": "object", "properties": {"text": {"type": "string"}},
                                                                                          "required": ["text"]}, keep_note, read_only=False))
    session = ChatSession(chat_id="chat-1")
    noting = with_tools(run_tools=["note"], tool_steps=2)
    # Denied: it does not run, and the model reads that it was denied.
    [shown] = await answered(handlers.send(session, message("Note that the sky is blue."), **noting), session, "deny")
    assert any(m.get("metadata", {}).get("title") == "✋ note: waiting for your say" for m in shown)
    [question] = [m["content"] for m in shown if "tool-approval" in str(m["content"])]
    assert "✋ Run note?" in question and all(label in question for label in ("Allow once", "Always in this chat", "Deny"))
    denied = session.turns[1].steps[0].tool_calls[0]
    assert (denied.result, denied.error, notes) == (DENIED, "denied by the user", [])
    # Allowed once: it runs, and the next call asks again.
    asked = await answered(handlers.regenerate(session, **noting), session, "once")
    assert len(asked) >= 1 and len(notes) == len(asked)
    # Always in this chat: asked once, then never again in this chat.
    await answered(handlers.regenerate(session, **noting), session, "always")
    assert session.always_allowed == {"chat-1": {"note"}}
    before = len(notes)
    assert await answered(handlers.regenerate(session, **noting), session, "deny") == [] and len(notes) > before
    # A read-only tool runs without asking, unless the chat asks before every call.
    assert await answered(handlers.send(session, message("What is 17 times 23?"), **with_tools()), session, "deny") == []
    assert session.turns[-1].steps[0].tool_calls[0].error != "denied by the user"
    asked = await answered(handlers.send(session, message("What is 17 times 23?"), **with_tools(ask_every_call=True)), session, "deny")
    assert asked and session.turns[-1].steps[0].tool_calls[0].error == "denied by the user"


async def test_a_question_nobody_answers_ends_in_a_call_that_did_not_run(handlers, monkeypatch):
    monkeypatch.setitem(BUILTIN_TOOLS, "calculator", dataclasses.replace(BUILTIN_TOOLS["calculator"], read_only=False))
    monkeypatch.setattr(agent_loop, "ANSWER_SECONDS", 0.5)
    session = ChatSession()
    asked = [update async for update in handlers.send(session, message("What is 17 times 23?"), **with_tools()) if session.reply.question is not None]
    unanswered = session.turns[1].steps[0].tool_calls[0]
    assert asked and session.reply.question is None
    assert unanswered.result == agent_loop.UNANSWERED and unanswered.error.startswith("not answered within"), unanswered


async def test_stop_while_a_question_waits_ends_the_reply(handlers, monkeypatch):
    monkeypatch.setitem(BUILTIN_TOOLS, "calculator", dataclasses.replace(BUILTIN_TOOLS["calculator"], read_only=False))
    session = ChatSession()
    stopped = None
    async for _ in handlers.send(session, message("What is 17 times 23?"), **with_tools()):
        if session.reply.question is not None and stopped is None:
            handlers.stop(session)  # as the page's Stop: the reply sees it and ends
            stopped = time.monotonic()
    assert time.monotonic() - stopped < 1
    assert session.reply.question is None and session.turns[1].steps[0].tool_calls[0].result is None


async def test_a_tool_the_page_does_not_have_is_said_on_the_message(handlers):
    session = ChatSession()
    await run(handlers.send(session, message("Hi"), **with_tools(run_tools=["rm"])))
    assert "run_tools names no tool here: rm" in session.turns[0].error and len(session.turns) == 1


def test_a_result_is_shown_as_text_never_as_html():
    call = SavedToolCall(id="c1", name="calculator", arguments='{"expression": "1"}', result="<img src=x onerror=alert(1)> ```", seconds=0.01)
    turn = Turn(role="assistant", steps=[ToolStep(tool_calls=[call])], content="Done.")
    [block] = [m for m in render(MessageTree.line([turn])) if m.get("metadata", {}).get("title") == "⚙ calculator"]
    assert "````\n<img src=x onerror=alert(1)> ```\n````" in block["content"], "in a fence its text cannot close"
    waiting = call.model_copy(update={"result": None, "seconds": None})
    running = Turn(role="assistant", steps=[ToolStep(tool_calls=[waiting])], writing=True)
    assert [m["metadata"] for m in render(MessageTree.line([running]))] == [{"title": "⚙ calculator: running…", "status": "pending"}]
    limit = Turn(role="assistant", steps=[ToolStep(tool_calls=[call])], step_limit=2)
    assert any(m.get("metadata", {}).get("title") == "⏹ Step limit reached" for m in render(MessageTree.line([limit])))
