"""Two app processes over one PostgreSQL serve the same user's chats: the way to run several
replicas of the app. Real processes (`python app.py --database-url …`), a real PostgreSQL
server (a throwaway cluster), the page's endpoints called as its tabs call them."""

import re

import pytest

from harness.browser import AppProcess
from harness.postgres import fresh_database
from tests.page_client import PageClient, browser_kept, error, shown

pytestmark = pytest.mark.server
PASSWORD = "alice-pw"


@pytest.fixture
def replicas(postgres, tmp_path):
    url = fresh_database(postgres)
    started = []
    try:
        for name in ("one", "two"):
            folder = tmp_path / name
            folder.mkdir()
            started.append(AppProcess(folder, ("--auth", f"alice:{PASSWORD}", "--database-url", url)))
        yield started
    finally:
        for app in started:
            app.stop()


def opened(tab):
    return browser_kept(tab.call("restore", [None, None]))["current"]


def chats(tab):
    return tab.call("search_chats", [None, ""])["output"]["data"][0]["choices"]


def test_two_app_processes_over_one_postgresql_serve_the_same_users_chats(replicas):
    one, two = (PageClient(app.url, "alice", PASSWORD) for app in replicas)
    try:
        assert "Chats kept in postgresql+psycopg://anychat@127.0.0.1" in replicas[0].log()
        first = opened(one)
        assert error(one.chat("Say apple.")) is None
        opened(two)
        assert chats(two) == [["Say apple.", first]], "the other process lists the chat"
        switched = two.call("switch_chat", [None, None, "", "", "", first])
        assert "Say apple." in shown(switched)
        # Going on in both processes from the same reply: each message its own row, nothing
        # overwritten; the two are versions of one message, the one written last shown.
        assert error(two.chat("Say banana.")) is None
        assert error(one.chat("Say cherry.")) is None
        again = PageClient(replicas[0].url, "alice", PASSWORD)
        try:
            opened(again)
            seen = shown(again.call("switch_chat", [None, None, "", "", "", first]))
            assert "Say apple." in seen and "Say cherry." in seen and "2/2" in seen, seen
            [earlier] = re.findall(r"version-go v-(\d+)", seen)
            seen = shown(again.call("switch_version", [None, earlier]))
        finally:
            again.close()
        assert "Say apple." in seen and "Say banana." in seen and "1/2" in seen, seen
    finally:
        one.close()
        two.close()
