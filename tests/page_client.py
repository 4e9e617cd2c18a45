"""The page's endpoints called by hand, as an attacker calls them: raw HTTP to /gradio_api/queue,
any listener (private ones too) by the name the page's config gives it, with payloads no
browser would send."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8, "repetition_penalty": 1.0, "seed": None,
          "skip_special_tokens": True, "enable_thinking": True}
# The chat's ToolSettings controls as the page sends them, after its function schemas: none runs.
NO_TOOLS = {"run_tools": [], "tool_choice": "auto", "ask_every_call": False, "tool_steps": 10}


def file_data(path: str) -> dict[str, Any]:
    """A file as the page names one it uploaded: by its path on the server."""
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


class PageClient:
    """One browser tab of ``user``: its login, and its own session (the page's per-tab state)."""

    def __init__(self, url: str, user: str | None = None, password: str | None = None, timeout: float = 120) -> None:
        self.http = httpx.Client(base_url=url, timeout=timeout)
        if user is not None:
            self.http.post("/login", data={"username": user, "password": password}).raise_for_status()
        self.session = uuid.uuid4().hex
        config = self.http.get("/config").raise_for_status().json()
        self.listeners = {dependency["api_name"]: index for index, dependency in enumerate(config["dependencies"])}

    def close(self) -> None:
        self.http.close()

    def call(self, listener: str, data: list[Any], event_data: Any = None) -> dict[str, Any]:
        """The listener's last message: {"output": {"data": [...]}} or {"output": {"error": ...}},
        or {"status": code, "detail": ...} where the request itself was refused."""
        joined = self.http.post("/gradio_api/queue/join", json={
            "data": data, "event_data": event_data, "fn_index": self.listeners[listener], "trigger_id": None, "session_hash": self.session,
        })
        if joined.status_code != 200:
            return {"status": joined.status_code, "detail": joined.json().get("detail")}
        with self.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": self.session}) as messages:
            for line in messages.iter_lines():
                if line.startswith("data:") and (message := json.loads(line[5:]))["msg"] == "process_completed":
                    return message
        raise AssertionError(f"{listener}: the stream ended before the call completed")

    def chat(self, text: str, files: list[dict] = (), system: Any = "") -> dict[str, Any]:
        """Send a message, as Enter in the page does (greedy, a few tokens, to the default model,
        compacted past its context)."""
        return self.call("chat", [None, {"text": text, "files": list(files)}, system, "", "text", "", "", "compact", "auto", *NO_TOOLS.values(),
                                  *GREEDY.values()])

    def upload(self, name: str, data: bytes) -> str:
        """Put a file on the page, as its upload button does; its path on the server."""
        answer = self.http.post("/gradio_api/upload", files={"files": (name, data)})
        answer.raise_for_status()
        return answer.json()[0]


def shown(message: dict[str, Any]) -> str:
    """Everything a completed call put on the page, as text to search."""
    return json.dumps(message.get("output"), ensure_ascii=False)


def error(message: dict[str, Any]) -> str | None:
    """What the page was told went wrong, if anything."""
    return message.get("detail") or (message.get("output") or {}).get("error")


def browser_kept(message: dict[str, Any]) -> dict[str, str]:
    """What a completed ``restore`` (the page opening) hands the browser to keep: its id and the chat shown."""
    [kept] = [value for value in message["output"]["data"] if isinstance(value, dict) and set(value) == {"id", "current"}]
    return kept
