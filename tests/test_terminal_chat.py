"""`python app.py chat`, driven through its stdin as a person would type."""

import asyncio
import io
import os
import signal
import subprocess
import sys
import threading

import pytest

from engines import ChatModel
from engines.prompt.reply_parser import ToolCall
from harness.mcp_config import demo_entry, write_config
from tools import BUILTIN_TOOLS, ToolCatalog, ToolSettings, run_call

pytestmark = pytest.mark.server  # `python app.py chat`, a process of its own

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = "Answer in one short sentence."


def test_terminal_chat_streams_keeps_history_and_obeys_commands():
    typed = "My name is Ada.\nWhat is my name?\nclear\nWhat is my name?\nexit\n"
    result = subprocess.run(
        [sys.executable, "app.py", "chat", "--system", SYSTEM, "--temperature", "0", "--max-new-tokens", "24"],
        input=typed, capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "History cleared." in out
    replies = [part.split("\n")[0].strip() for part in out.split("Assistant: ")[1:]]
    assert len(replies) == 3 and all(replies)

    question = [{"role": "user", "content": "What is my name?"}]
    with ChatModel() as default:  # the model the terminal chat loads by default, on the backend it chooses
        why = f" ({default.backend_reason})" if default.backend_reason else ""
        assert f"Ready: SmolLM2-135M-Instruct (embedded) on {default.backend}{why}." in out
        [fresh] = default.chat(question, system=SYSTEM, temperature=0, max_new_tokens=24)
    # After `clear` the question is answered as if asked first; before it, the history changed the answer.
    assert replies[2] == fresh.response_text.split("\n")[0].strip()
    assert replies[1] != replies[2]


def test_ctrl_c_stops_the_reply_and_a_second_ctrl_c_at_the_prompt_quits():
    chat = subprocess.Popen(
        [sys.executable, "app.py", "chat", "--temperature", "0", "--max-new-tokens", "2000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"},
        # As a shell script's background job (`cmd &`) starts it: with SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    output = Output(chat.stdout)
    try:
        output.wait_for("Ready:")
        chat.stdin.write("Write a very long story about a dragon, in many chapters.\n")
        chat.stdin.flush()
        output.wait_for("Assistant: ", then_chars=40)
        chat.send_signal(signal.SIGINT)
        output.wait_for(" [stopped]\n\nUser: ")
        # The same process answers the next message: the stopped reply freed the model. (After
        # clear: with the story in the history, the small model would carry the story on.)
        chat.stdin.write("clear\nSay hi.\n")
        chat.stdin.flush()
        output.wait_for("User: ", count=4)
        chat.send_signal(signal.SIGINT)
        assert chat.wait(timeout=60) == 0, chat.stderr.read()[-3000:] + output.text[-1000:]
    finally:
        chat.kill()
    stderr = chat.stderr.read()
    assert "Traceback" not in stderr, stderr[-2000:]
    story = output.text.split("Assistant: ")[1].split(" [stopped]")[0]
    assert 40 <= len(story) < 4000, "the reply did not stop at Ctrl-C"
    assert output.text.split("Assistant: ")[2].split("\n")[0].strip(), "the next message got no reply"


class Output:
    """What a process writes to a pipe, read on a thread so the test can wait for text."""

    def __init__(self, pipe) -> None:
        self.text = ""
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe) -> None:
        while piece := pipe.read(1):
            with self._changed:
                self.text += piece
                self._changed.notify_all()

    def wait_for(self, marker: str, count: int = 1, then_chars: int = 0, timeout: float = 300) -> None:
        def seen() -> bool:
            if self.text.count(marker) < count:
                return False
            return len(self.text) - self.text.rindex(marker) - len(marker) >= then_chars
        with self._changed:
            assert self._changed.wait_for(seen, timeout), f"no {marker!r} in:\n{self.text[-2000:]}"


def test_the_tools_chosen_run_when_a_reply_calls_them_and_the_model_goes_on():
    typed = "What is 17 times 23?\nexit\n"
    result = subprocess.run(
        [sys.executable, "app.py", "chat", "--run-tools", "calculator", "--tool-choice", "required", "--tool-steps", "2",
         "--temperature", "0", "--max-new-tokens", "40"],
        input=typed, capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    call = out.split("[tool call] calculator(", 1)[1].split(")\n", 1)[0]
    expected = asyncio.run(run_call(BUILTIN_TOOLS["calculator"], ToolCall("calculator", call)))
    shown = f"[calculator failed] {expected.error}" if expected.error is not None else f"[calculator] {expected.content}"
    assert shown in out, out[-2000:]
    # The model wrote a second answer after the result (or called again, at its step limit).
    after = out.split(shown, 1)[1].split("\nUser: ", 1)[0]
    assert after.strip(), out[-2000:]


def test_a_call_that_asks_first_runs_only_as_the_user_answers():
    from terminal_chat import run_terminal_chat

    typed = io.StringIO("What is 17 times 23?\nn\nexit\n")
    out = io.StringIO()
    asking = ToolSettings(run_tools=["calculator"], tool_choice="required", tool_steps=2, ask_every_call=True)
    run_terminal_chat({"temperature": 0, "max_new_tokens": 40}, stdin=typed, stdout=out, tools=asking)
    said = out.getvalue()
    assert "[asks] run calculator? y: once, a: always in this chat, n: no > " in said, said[-2000:]
    assert "[calculator failed] denied by the user" in said and "[calculator] " not in said, said[-2000:]


def test_a_tool_that_is_not_there_is_refused_at_the_start():
    from app import main

    with pytest.raises(SystemExit, match="run_tools names no tool here: rm"):
        main(["chat", "--run-tools", "calculator,rm"])


def test_the_mcp_servers_connect_before_the_chat_names_their_tools_and_close_after(tmp_path, capsys, monkeypatch):
    import app
    from app import main

    made: list[ToolCatalog] = []

    class KeptCatalog(ToolCatalog):
        """The app's catalog, kept here to look at after the chat."""

        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(app, "ToolCatalog", KeptCatalog)
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -r requirements.txt)")
    config = write_config(tmp_path / "mcp.json", {"demo": demo_entry(), "missing": {"command": "no-such-command-here"}})
    with pytest.raises(SystemExit, match=r"run_tools names no tool here: missing__x \(its MCP server missing is failed"):
        main(["chat", "--mcp-config", str(config), "--run-tools", "demo__add,missing__x"])
    said = capsys.readouterr().err
    assert "MCP server demo: ready: demo__add, " in said and "MCP server missing: failed (its command was not found" in said
    assert len(made) == 1 and made[0].servers is None, "the servers are closed as the chat ends"
    (tmp_path / "other.json").write_text('{"servers": {}}')
    with pytest.raises(SystemExit, match='--mcp-config: the MCP config .* has no "mcpServers" object'):
        main(["chat", "--mcp-config", str(tmp_path / "other.json")])


def test_a_terminal_chat_past_the_context_goes_on_with_its_oldest_turns_left_out():
    """--max-model-len 1024 and --context-policy drop_oldest: long messages pass the context, the
    chat says what it left out, and every message gets an answer."""
    long = "Note {}: " + " ".join(f"the keeper saw ship {i} pass the rocks at dawn." for i in range(25)) + "\n"
    typed = "".join(long.format(number) for number in range(6)) + "exit\n"
    result = subprocess.run(
        [sys.executable, "app.py", "chat", "--temperature", "0", "--max-new-tokens", "8", "--max-model-len", "1024",
         "--context-policy", "drop_oldest"],
        input=typed, capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "error:" not in result.stdout, result.stdout[-2000:]
    assert "[compacted] " in result.stdout and "Left out: " in result.stdout
    assert result.stdout.count("Assistant: ") == 6
