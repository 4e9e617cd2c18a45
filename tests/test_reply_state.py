"""The tab's reply as a state machine (chat/reply_state.py): the phases the page's events share,
and the transitions between them, without a page or a model."""

from __future__ import annotations

import asyncio
import copy

from chat.approval import Question
from chat.reply_state import Phase, ReplyState


def test_one_reply_at_a_time_and_stop_only_where_a_reply_is_written():
    state = ReplyState()
    state.stop()
    assert state.phase is Phase.IDLE, "a Stop with no reply stops nothing (the next reply is not born stopped)"
    assert state.begin() and state.answering and not state.stopping
    assert not state.begin(), "a second reply is refused while one is written"
    state.stop()
    assert state.stopping and state.answering
    state.end()
    assert state.phase is Phase.IDLE and state.begin() and not state.stopping


async def test_waiting_for_the_user_and_for_the_browser_are_phases_of_the_reply_and_stop_outlasts_them():
    state = ReplyState()
    state.begin()
    question = Question("key", asyncio.get_running_loop().create_future())
    with state.asking(question):
        assert state.phase is Phase.ASKING and state.question is question
    assert state.phase is Phase.ANSWERING and state.question is None

    with state.running_in_browser("code") as first, state.running_in_browser("code") as second:
        assert first is second, "calls of the same code wait for one run"
        assert state.phase is Phase.RUNNING_IN_BROWSER and set(state.browser_runs) == {"code"}
        state.stop()
    assert state.stopping and state.browser_runs == {}, "a reply stopped while it waited stays stopping"

    with state.asking(question):
        assert state.stopping, "a reply stopping asks nothing more"
    state.end()
    assert state.phase is Phase.IDLE



def test_each_tab_gets_a_state_of_its_own():
    """gr.State deep-copies the page's first session for each tab it opens."""
    first = ReplyState()
    copied = copy.deepcopy(first)
    copied.begin()
    assert copied.answering and not first.answering and copied._lock is not first._lock
