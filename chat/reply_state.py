"""What a tab's reply is doing: the one piece of state that the page's events share about it,
written as a small state machine instead of flags that each event sets and reads.

    idle ── a reply starts (send, regenerate, continue, an edit answered) ──▶ answering
    answering ── a tool call waits for the user's say ──▶ asking ── said ──▶ answering
    answering ── a python call waits for the tab's browser ──▶ running in the browser ── ran ──▶ answering
    answering, asking, running in the browser ── Stop (the button, a switch of chats) ──▶ stopping
    any ── the reply ends ──▶ idle

The reply event takes the tab out of idle and gives it back (webui/replying.py); while it is out,
another reply is refused and the sidebar leaves the chat alone. Stop is read by the reply at its
next update; a reply stopping stays stopping whatever it was waiting on (the page cancels the
wait). The approval and Run events settle what the reply waits on (chat/approval.py,
chat/browser_python.py), and the phase says which of those the reply waits on.

Stop comes from a page event run on one of Gradio's threads, the rest on the event loop: each
change is made under a lock, so that a Stop landing as the reply ends cannot leave the tab
stopping with no reply to stop (and every later send refused as busy)."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

from .approval import Question


class Phase(Enum):
    IDLE = "idle"
    ANSWERING = "answering"
    STOPPING = "stopping"
    ASKING = "asking"
    RUNNING_IN_BROWSER = "running in the browser"


@dataclass
class ReplyState:
    """``question``: while asking, the calls the reply waits on the user's say about;
    ``browser_runs``: while running in the browser, the python calls' runs waited for, by the
    code's key (calls of the same code share one run)."""

    phase: Phase = Phase.IDLE
    question: Question | None = None
    browser_runs: dict[str, asyncio.Future] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Not a field: Gradio reads a gr.State's value with dataclasses.asdict, which copies every field.
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ReplyState:
        """gr.State copies the page's first session for each tab it opens: each copy has a lock of its own."""
        return ReplyState(self.phase, copy.deepcopy(self.question, memo), copy.deepcopy(self.browser_runs, memo))

    @property
    def answering(self) -> bool:
        """A reply is being written (in any phase of it)."""
        return self.phase is not Phase.IDLE

    @property
    def stopping(self) -> bool:
        return self.phase is Phase.STOPPING

    def begin(self) -> bool:
        """idle → answering; False, and nothing changed, where a reply is written already."""
        with self._lock:
            if self.phase is not Phase.IDLE:
                return False
            self.phase = Phase.ANSWERING
            return True

    def stop(self) -> None:
        """→ stopping, where a reply is written (a Stop with none written stops nothing)."""
        with self._lock:
            if self.phase is not Phase.IDLE:
                self.phase = Phase.STOPPING

    def end(self) -> None:
        """→ idle, whatever the reply was doing."""
        with self._lock:
            self.phase = Phase.IDLE
            self.question = None

    @contextmanager
    def asking(self, question: Question) -> Iterator[None]:
        """asking while the body waits for the user's say about ``question``; answering after."""
        with self._lock:
            self.question = question
            self._wait(Phase.ASKING)
        try:
            yield
        finally:
            with self._lock:
                self.question = None
                self._waited(Phase.ASKING)

    @contextmanager
    def running_in_browser(self, key: str) -> Iterator[asyncio.Future]:
        """running in the browser while the body waits for the run of the code ``key`` names
        (the future the Run event settles, shared by calls of the same code); answering after."""
        with self._lock:
            ran = self.browser_runs.setdefault(key, asyncio.get_running_loop().create_future())
            self._wait(Phase.RUNNING_IN_BROWSER)
        try:
            yield ran
        finally:
            with self._lock:
                self.browser_runs.pop(key, None)
                if not self.browser_runs:
                    self._waited(Phase.RUNNING_IN_BROWSER)

    def _wait(self, phase: Phase) -> None:
        if self.phase is Phase.ANSWERING:
            self.phase = phase

    def _waited(self, phase: Phase) -> None:
        if self.phase is phase:
            self.phase = Phase.ANSWERING
