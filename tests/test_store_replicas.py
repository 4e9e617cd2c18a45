"""Two app processes over one PostgreSQL serve the same user's chats: the way to run several
replicas of the app, called directly and behind nginx as docs/cluster.md sets it up. Real
processes (`python app.py --database-url …`), a real PostgreSQL server (a throwaway cluster),
Debian's nginx, the page's endpoints called as its tabs call them."""

import json
import re
import time

import openai
import pytest

from harness.browser import AppProcess
from harness.nginx_proxy import nginx_proxy, replicas_used
from harness.postgres import fresh_database
from tests.page_client import PageClient, browser_kept, error, shown

pytestmark = pytest.mark.server
PASSWORD = "alice-pw"


@pytest.fixture(scope="module")
def replicas(postgres, tmp_path_factory):
    """Two app processes over one fresh database, for the module (the proxy's test, last, stops one)."""
    url = fresh_database(postgres)
    started = []
    try:
        for name in ("one", "two"):
            started.append(AppProcess(tmp_path_factory.mktemp(name), ("--auth", f"alice:{PASSWORD}", "--database-url", url)))
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
        assert "Chats and documents kept in postgresql+psycopg://anychat@127.0.0.1" in replicas[0].log()
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
            seen = shown(again.call("switch_version", [None, json.dumps({"kind": "version", "value": earlier})]))
        finally:
            again.close()
        assert "Say apple." in seen and "Say banana." in seen and "1/2" in seen, seen
    finally:
        one.close()
        two.close()


def test_behind_a_proxy_a_client_stays_on_one_replica_and_the_other_takes_over_when_it_stops(replicas, tmp_path):
    with nginx_proxy([app.url for app in replicas], tmp_path) as url:
        tab = PageClient(url, "alice", PASSWORD)
        try:
            first = opened(tab)
            assert error(tab.chat("Say grape.")) is None
        finally:
            tab.close()
        # Sticky: every request of this client, the page's queue and its stream included, went to one replica.
        [address] = set(replicas_used(tmp_path))
        [stopped] = [app for app in replicas if app.url.rstrip("/").endswith(address)]
        # The API streams through it as it is written: the first words come long before the last
        # (a proxy that buffered would pass them on together, at the end or as its buffer fills;
        # the API asks nginx not to, X-Accel-Buffering, which holds with proxy_buffering on too).
        client = openai.OpenAI(base_url=f"{url}v1", api_key=f"alice:{PASSWORD}", max_retries=0, timeout=120)
        started = time.monotonic()
        arrived = [time.monotonic() - started for chunk in client.chat.completions.create(
            model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "Write a story about a cat."}], temperature=0, max_tokens=64,
            stream=True) if chunk.choices and chunk.choices[0].delta.content]
        assert len(arrived) >= 32 and arrived[0] < arrived[-1] / 2, f"not streamed: {len(arrived)} pieces, the first at {arrived[0]:.2f} s, the last at {arrived[-1]:.2f} s"

        # Its replica stops: the proxy sends the client to the other one, which opens the same chats (after a new login: logins are each process's own).
        stopped.stop()
        again = PageClient(url, "alice", PASSWORD)
        try:
            assert opened(again) == first, "the other replica opens the chat the client had open"
            assert "Say grape." in shown(again.call("switch_chat", [None, None, "", "", "", first])), "and shows what the stopped one wrote"
            assert error(again.chat("Say melon.")) is None
        finally:
            again.close()
        assert replicas_used(tmp_path)[-1] != address, "the last requests did not go to the other replica"
