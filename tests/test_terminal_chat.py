"""`python app.py chat`, driven through its stdin as a person would type."""

import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = "Answer in one short sentence."


def test_terminal_chat_streams_keeps_history_and_obeys_commands(chat_model):
    typed = "My name is Ada.\nWhat is my name?\nclear\nWhat is my name?\nexit\n"
    result = subprocess.run(
        [sys.executable, "app.py", "chat", "--system", SYSTEM, "--temperature", "0", "--max-new-tokens", "24"],
        input=typed, capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Ready: SmolLM2-135M-Instruct (embedded) on huggingface." in out
    assert "History cleared." in out
    replies = [part.split("\n")[0].strip() for part in out.split("Assistant: ")[1:]]
    assert len(replies) == 3 and all(replies)

    question = [{"role": "user", "content": "What is my name?"}]
    [fresh] = chat_model.chat(question, system=SYSTEM, temperature=0, max_new_tokens=24)
    # After `clear` the question is answered as if asked first; before it, the history changed the answer.
    assert replies[2] == fresh.response_text.split("\n")[0].strip()
    assert replies[1] != replies[2]
