"""Attacks on the engine's request path, made the way an outsider makes them: raw HTTP to the app
of `python app.py --backend huggingface` on the real default model (served in the test process:
harness/app_in_process.py), each attacker and each other user from its own loopback address
(127.0.0.2, 127.0.0.3, …), as different machines would be.

- stop strings beyond the limits (transformers' StopStringCriteria held the model 40-60 s here
  for one 4,000-character string) are refused at once, and strings at the limits cost nothing;
- a prompt far beyond the context is refused before it is tokenized, without stalling the
  streams of others; requests beyond the line are refused before any work; a streaming request
  with n is prepared once and takes its places in line all at once, or none;
- one client cannot take the whole line: its share is capped, and the line admits users in
  turn, so another user is answered after the reply being written, not after all of the
  attacker's.

The bounds are generous (the machine is shared): the point is "not locked out", not a timing.
Each test prints what it measured.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import httpx
import psutil
import pytest
from gradio_client import Client

from engines.backends.grammar_sandbox import COMPILE_SECONDS
from engines.generation_args import MAX_STOP_LENGTH, MAX_STOP_STRINGS
from harness.app_in_process import AppInProcess

pytestmark = pytest.mark.server

COUNTING = [{"role": "user", "content": "Write the numbers from 1 to 1000, separated by commas."}]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MODEL = "SmolLM2-135M-Instruct"
# Far beyond the model's context (8,192 tokens), and under the API's body limit (50 MB).
HUGE_PROMPT_CHARS = 45_000_000
# Beyond the context too, but short enough that only tokenizing it can tell (SmolLM2's longest
# token is 81 characters: 8,192 tokens may hold up to 663,552 of them).
LONG_PROMPT_CHARS = 600_000
# The longest pause a running stream may show while an attack arrives; untouched, these attacks
# paused it for seconds to minutes.
STREAM_GAP_BOUND = 5.0


def body(messages, **settings):
    return {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 8, **settings}


def streamed_content(sse: str) -> str:
    """The text of reply 0 in a streamed answer's events."""
    events = [json.loads(line.removeprefix("data: ")) for line in sse.splitlines() if line.startswith("data: {")]
    return "".join(choice["delta"].get("content") or "" for event in events for choice in event.get("choices", ()) if choice["index"] == 0)


def client_from(address: str, auth: tuple[str, str] | None = None) -> httpx.Client:
    """An HTTP client whose connections come from ``address``, a loopback address of its own,
    logged in as ``auth`` (user, password) where given."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=httpx.Timeout(300, connect=30), auth=auth)


class Stream(threading.Thread):
    """A streaming completion from ``address``, noting when each of its events arrived; it runs
    until it ends or ``close()``."""

    def __init__(self, url: str, address: str, request: dict, auth: tuple[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.address, self.request, self.auth = url, address, {**request, "stream": True}, auth
        self.times: list[float] = []
        self.events: list[dict] = []
        self.status: int | None = None
        self.started = threading.Event()
        self.ended: float | None = None
        self._closing = threading.Event()

    def run(self) -> None:
        try:
            with client_from(self.address, self.auth) as client, client.stream("POST", f"{self.url}v1/chat/completions", json=self.request) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        self.times.append(time.monotonic())
                        self.events.append(json.loads(line.removeprefix("data: ")))
                        self.started.set()
                    if self._closing.is_set():
                        return
            self.ended = time.monotonic()
        finally:
            self.started.set()

    def close(self) -> None:
        self._closing.set()
        self.join(60)

    def finished_replies(self) -> int:
        return sum(1 for event in self.events for choice in event.get("choices", ()) if choice.get("finish_reason"))

    def longest_gap(self, start: float, end: float) -> float:
        """The longest pause between two events of this stream that overlaps [start, end]."""
        times = [*self.times, time.monotonic()] if self.is_alive() else self.times
        gaps = [later - earlier for earlier, later in zip(times, times[1:]) if later >= start and earlier <= end]
        return max(gaps, default=0.0)


def running_stream(url: str, address: str, auth: tuple[str, str] | None = None) -> Stream:
    """A long greedy reply being written, from ``address``: it holds the model's one slot."""
    stream = Stream(url, address, body(COUNTING, max_tokens=3000), auth)
    stream.start()
    assert stream.started.wait(120) and stream.status == 200, stream.status
    # The first event is the role chunk, sent once the reply has started.
    deadline = time.monotonic() + 120
    while len(stream.times) < 3:
        assert time.monotonic() < deadline, "the running reply wrote nothing"
        time.sleep(0.05)
    return stream


def wait_until_waiting(app: AppInProcess, count: int) -> None:
    """Until ``count`` replies wait in the app's line for the model."""
    line = app.loaded_models.model.line
    deadline = time.monotonic() + 120
    while line.waiting != count:
        assert time.monotonic() < deadline, f"{line.waiting} replies wait in line, not {count}"
        time.sleep(0.05)


def post(url: str, address: str, request: dict, timeout: float = 300, auth: tuple[str, str] | None = None) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    with client_from(address, auth) as client:
        response = client.post(f"{url}v1/chat/completions", json=request, timeout=timeout)
    return response, time.monotonic() - started


@dataclass
class Attack:
    """An attacker's request and its answer, beside another user's ordinary question and its
    answer, and the server's resident memory sampled meanwhile (read its max)."""

    response: httpx.Response
    seconds: float
    answered: httpx.Response
    answered_seconds: float
    memory: list[int]


def attack_while_another_asks(app: AppInProcess, request: dict) -> Attack:
    """``request`` sent from 127.0.0.2, and half a second later a plain question from 127.0.0.3."""
    done = threading.Event()
    memory = peak_rss(psutil.Process(app.pid), done)
    attack = {}

    def attacker() -> None:
        attack["response"], attack["seconds"] = post(app.url, "127.0.0.2", request)

    thread = threading.Thread(target=attacker)
    thread.start()
    try:
        time.sleep(0.5)
        answered, seconds = post(app.url, "127.0.0.3", body(QUESTION))
    finally:
        thread.join(600)
        done.set()
    return Attack(attack["response"], attack["seconds"], answered, seconds, memory)


def peak_rss(process: psutil.Process, until: threading.Event) -> list[int]:
    """The server's resident memory, sampled until ``until`` is set; read the list's max."""
    samples = [process.memory_info().rss]

    def sample() -> None:
        while not until.wait(0.1):
            samples.append(process.memory_info().rss)

    threading.Thread(target=sample, daemon=True).start()
    return samples


# The tests come grouped by the app they run on: of in-process apps, only the one started last
# may be used while it runs.


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    process = AppInProcess(tmp_path_factory.mktemp("app"), ("--backend", "huggingface"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def small_line_app(tmp_path_factory):
    """One slot and three places in line, two of them at most for one user."""
    process = AppInProcess(tmp_path_factory.mktemp("app"), ("--backend", "huggingface", "--max-waiting", "3", "--max-waiting-per-user", "2"))
    yield process
    process.stop()


# ---- stop strings


def test_a_stop_string_beyond_the_limits_is_refused_at_once_and_others_carry_on(app):
    attack = attack_while_another_asks(app, body(QUESTION, stop=["x" * 4000]))
    print(f"\n4,000-character stop string: {attack.response.status_code} after {attack.seconds:.2f} s; another user answered "
          f"in {attack.answered_seconds:.2f} s; server RSS {attack.memory[0] / 2**20:.0f} -> peak {max(attack.memory) / 2**20:.0f} MiB")
    assert attack.answered.status_code == 200 and "Paris" in attack.answered.json()["choices"][0]["message"]["content"]
    assert attack.response.status_code == 400, attack.response.text
    error = attack.response.json()["error"]
    assert f"at most {MAX_STOP_LENGTH} characters" in error["message"], error
    assert attack.seconds < 30 and attack.answered_seconds < 60

    too_many, _ = post(app.url, "127.0.0.2", body(QUESTION, stop=[str(i) for i in range(MAX_STOP_STRINGS + 1)]))
    assert too_many.status_code == 400 and f"at most {MAX_STOP_STRINGS} stop strings" in too_many.json()["error"]["message"], too_many.text


def test_stop_strings_at_the_limits_cost_nothing(app):
    """Four stop strings of the longest length allowed (for each of which transformers'
    StopStringCriteria would precompute a vocabulary-sized table) and one that ends the reply:
    answered about as fast as without them."""
    stops = ["x" * MAX_STOP_LENGTH, "y" * MAX_STOP_LENGTH, "z" * MAX_STOP_LENGTH, " Paris"]
    for stream in (False, True):
        timed = {}
        for name, request in (("plain", body(QUESTION, max_tokens=6, stream=stream)), ("stops", body(QUESTION, stop=stops, max_tokens=24, stream=stream))):
            response, timed[name] = post(app.url, "127.0.0.2", request)
            assert response.status_code == 200, response.text
        text = streamed_content(response.text) if stream else response.json()["choices"][0]["message"]["content"]
        print(f"\n4 stop strings of {MAX_STOP_LENGTH} characters, stream={stream}: {timed['stops']:.2f} s (without them {timed['plain']:.2f} s)")
        assert text == "The capital of France is", text
        assert timed["stops"] < 3 * timed["plain"] + 2


def test_a_pattern_of_huge_repetitions_is_refused_before_any_grammar_is_built(app):
    """107 bytes of schema, ^a{300000000}$, once took the server up by 800 MiB (which stayed)
    before the grammar's own size was checked; a{4000000000} would have asked for 12 GB."""
    server = psutil.Process(app.pid)
    post(app.url, "127.0.0.3", body(QUESTION))  # the memory a first reply sets up is no attack's
    done = threading.Event()
    memory = peak_rss(server, done)
    try:
        for pattern in ("^a{300000000}$", "^a{4000000000}$", "^(a{1000}){1000}$"):
            schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}, "required": ["code"]}
            response, seconds = post(app.url, "127.0.0.2", body(QUESTION, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
            assert response.status_code == 400, response.text
            assert "schema.properties.code.pattern writes out more than 5,000 pieces" in response.json()["error"]["message"], response.text
            assert seconds < 30
        answered, _ = post(app.url, "127.0.0.3", body(QUESTION))
    finally:
        done.set()
    print(f"\nhuge pattern repetitions refused; server RSS {memory[0] / 2**20:.0f} -> peak {max(memory) / 2**20:.0f} MiB")
    assert answered.status_code == 200
    assert max(memory) - memory[0] < 100 * 2**20


def test_a_schema_too_costly_to_compile_is_stopped_in_its_child_while_others_are_answered(app):
    """64 strings of a maxLength near 1,000 each pass the door's bounds, but xgrammar would take
    minutes over them: the compile's child process is stopped at its CPU time and the request
    refused in words, while another user is answered and the server's memory stays where it was."""
    post(app.url, "127.0.0.3", body(QUESTION))  # the memory a first reply sets up is no attack's
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 1000 - i} for i in range(64)}}
    attack = attack_while_another_asks(app, body(QUESTION, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    print(f"\n64 long strings: {attack.response.status_code} after {attack.seconds:.2f} s; another user answered in "
          f"{attack.answered_seconds:.2f} s; server RSS {attack.memory[0] / 2**20:.0f} -> peak {max(attack.memory) / 2**20:.0f} MiB")
    assert attack.response.status_code == 400, attack.response.text
    message = attack.response.json()["error"]["message"]
    assert message.startswith(f"The x schema takes more than this server gives one reply format to compile ({COMPILE_SECONDS} s of CPU time"), message
    assert attack.answered.status_code == 200 and attack.answered_seconds < 30
    assert max(attack.memory) - attack.memory[0] < 100 * 2**20


# ---- work before the line


def test_a_prompt_far_beyond_the_context_is_refused_before_it_is_tokenized(app):
    running = running_stream(app.url, "127.0.0.3")
    try:
        started = time.monotonic()
        refused, seconds = post(app.url, "127.0.0.2", body([{"role": "user", "content": "hello " * (HUGE_PROMPT_CHARS // 6)}]))
        gap = running.longest_gap(started, time.monotonic())
        print(f"\n45 MB prompt: {refused.status_code} after {seconds:.2f} s; the running stream's longest pause meanwhile {gap:.2f} s")
        assert refused.status_code == 400, refused.text[:500]
        assert "more than this model's limit of 8192 tokens" in refused.json()["error"]["message"]
        assert gap < STREAM_GAP_BOUND
    finally:
        running.close()


def test_a_streaming_request_with_n_is_prepared_once(app):
    """A prompt too long for the context, which only tokenizing it shows, asked for once and
    then with 16 sampled replies: the second is refused as fast as the first."""
    running = running_stream(app.url, "127.0.0.3")
    try:
        started = time.monotonic()
        request = body([{"role": "user", "content": "hello " * (LONG_PROMPT_CHARS // 6)}], temperature=1.0, stream=True)
        once, once_seconds = post(app.url, "127.0.0.2", request)
        sixteen, sixteen_seconds = post(app.url, "127.0.0.2", {**request, "n": 16})
        gap = running.longest_gap(started, time.monotonic())
        print(f"\n{LONG_PROMPT_CHARS:,}-character prompt, streamed: {once.status_code} after {once_seconds:.2f} s; with n=16 "
              f"{sixteen.status_code} after {sixteen_seconds:.2f} s; the running stream's longest pause {gap:.2f} s")
        for refused in (once, sixteen):
            assert refused.status_code == 400 and "tokens long" in refused.json()["error"]["message"], refused.text[:500]
        assert sixteen_seconds < 4 * once_seconds + 1, "the request was prepared once per reply"
        assert gap < STREAM_GAP_BOUND
    finally:
        running.close()


# ---- one user's share of the line


def test_one_client_cannot_take_the_line_and_others_are_answered_in_turn(app):
    """The attacker (127.0.0.2) sends a long reply, then two requests of 16 sampled replies
    each and one more; a page user (127.0.0.1) then asks a question."""
    url = app.url
    attack = Stream(url, "127.0.0.2", body(COUNTING, n=16, temperature=1.0, max_tokens=64))
    attack.start()
    assert attack.started.wait(120) and attack.status == 200
    over_share, _ = post(url, "127.0.0.2", body(QUESTION, n=16, temperature=1.0, stream=True))
    print(f"\nthe attacker's second request of 16 replies: {over_share.status_code}")
    assert over_share.status_code == 503, over_share.text[:500]
    assert "--max-waiting-per-user" in over_share.json()["error"]["message"]
    fill = Stream(url, "127.0.0.2", body(COUNTING, max_tokens=64))
    fill.start()
    try:
        started = time.monotonic()
        page_user = Client(url, verbose=False)
        reply = page_user.predict({"text": "What is the capital of France?", "files": []}, system="", tools="", temperature=0,
                                  max_new_tokens=8, seed=None, api_name="/chat")[0]
        attacker_done = attack.finished_replies()
        print(f"the page user was answered after {time.monotonic() - started:.1f} s, when {attacker_done} of the attacker's 16 replies had ended")
        assert "Paris" in json.dumps(reply), reply
        assert attacker_done <= 3, "the page user waited behind the attacker's replies"
    finally:
        attack.close()
        fill.close()


# ---- a line of three places, two of them per user


def test_requests_beyond_the_line_are_refused_before_any_work(small_line_app):
    url = small_line_app.url
    running = running_stream(url, "127.0.0.2")
    waiting = [Stream(url, address, body(QUESTION)) for address in ("127.0.0.3", "127.0.0.4", "127.0.0.5")]
    try:
        for stream in waiting:
            stream.start()
        wait_until_waiting(small_line_app, 3)
        started = time.monotonic()
        long_prompt = body([{"role": "user", "content": "hello " * (LONG_PROMPT_CHARS // 6)}])
        results = [post(url, f"127.0.0.{6 + i}", long_prompt) for i in range(8)]
        gap = running.longest_gap(started, time.monotonic())
        statuses = [response.status_code for response, _ in results]
        slowest = max(seconds for _, seconds in results)
        print(f"\n8 requests beyond a full line, each {LONG_PROMPT_CHARS:,} characters: statuses {statuses}, slowest "
              f"{slowest:.2f} s; the running stream's longest pause {gap:.2f} s")
        assert statuses == [503] * 8, [response.text[:300] for response, _ in results]
        assert all("max_waiting=3" in response.json()["error"]["message"] for response, _ in results)
        assert gap < STREAM_GAP_BOUND
    finally:
        for stream in [running, *waiting]:
            stream.close()


def test_a_streaming_request_with_n_takes_its_places_all_or_none(small_line_app):
    """Three sampled replies streamed need three places while another user's reply is written
    and one more waits, and there are two: refused whole, before its answer starts; two replies
    fit. Four could never fit one user's share: refused as such."""
    url = small_line_app.url
    running = running_stream(url, "127.0.0.2")
    other = Stream(url, "127.0.0.4", body(QUESTION))
    other.start()
    try:
        wait_until_waiting(small_line_app, 1)
        refused, seconds = post(url, "127.0.0.3", body(QUESTION, n=3, temperature=1.0, stream=True))
        print(f"\nn=3 streamed with 2 places free: {refused.status_code} after {seconds:.2f} s")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_busy", refused.text[:500]
        never, _ = post(url, "127.0.0.3", body(QUESTION, n=4, temperature=1.0, stream=True))
        assert never.status_code == 400 and "one user may hold at most 3" in never.json()["error"]["message"], never.text[:500]
        fits = Stream(url, "127.0.0.3", body(QUESTION, n=2, temperature=1.0))
        fits.start()
        wait_until_waiting(small_line_app, 3)
        running.close()
        fits.join(300)
        assert fits.status == 200 and fits.finished_replies() == 2, "two replies should have found their two places"
    finally:
        running.close()
        other.close()


def test_the_page_and_the_api_from_one_address_share_its_places(small_line_app):
    """A page user at 127.0.0.1, whose address holds its two places in line already (through
    the API), is told so under the message, which stays in the conversation."""
    url = small_line_app.url
    running = running_stream(url, "127.0.0.2")
    waiting = [Stream(url, "127.0.0.1", body(QUESTION)) for _ in range(2)]
    try:
        for stream in waiting:
            stream.start()
        wait_until_waiting(small_line_app, 2)
        reply = Client(url, verbose=False).predict({"text": "What is the capital of France?", "files": []}, system="", tools="",
                                                   temperature=0, max_new_tokens=8, seed=None, api_name="/chat")[0]
        shown = json.dumps(reply)
        print(f"\nthe page, for an address over its share: {shown[-300:]}")
        assert "Your requests already hold 2 place(s) in line" in shown and "--max-waiting-per-user" in shown, shown
        assert "What is the capital of France?" in shown
    finally:
        for stream in [running, *waiting]:
            stream.close()


# ---- one user's share, with logins


def test_with_logins_each_login_has_its_own_share_wherever_it_connects_from(tmp_path_factory):
    """alice and bob call /v1 from the same address, logged in: the line knows them by their
    logins. alice, with a reply being written and her two places taken, is refused a third;
    bob still gets in, and is answered before alice's waiting requests: she had the last turn."""
    alice, bob = ("alice", "alice-pw"), ("bob", "bob-pw")
    app = AppInProcess(tmp_path_factory.mktemp("app"), ("--backend", "huggingface", "--auth", ":".join(alice), "--auth", ":".join(bob),
                                                        "--max-waiting", "4", "--max-waiting-per-user", "2"))
    streams = []
    try:
        streams.append(running := running_stream(app.url, "127.0.0.1", alice))
        streams += (alice_waiting := [Stream(app.url, "127.0.0.1", body(QUESTION), alice) for _ in range(2)])
        for stream in alice_waiting:
            stream.start()
        wait_until_waiting(app, 2)
        over_share, _ = post(app.url, "127.0.0.1", body(QUESTION, stream=True), auth=alice)
        assert over_share.status_code == 503 and "--max-waiting-per-user" in over_share.json()["error"]["message"], over_share.text[:500]
        streams.append(bob_waiting := Stream(app.url, "127.0.0.1", body(QUESTION), bob))
        bob_waiting.start()
        wait_until_waiting(app, 3)
        running.close()
        for stream in [bob_waiting, *alice_waiting]:
            stream.join(300)
        assert bob_waiting.status == 200 and bob_waiting.finished_replies() == 1, "bob's own share should have taken him in"
        assert all(stream.finished_replies() == 1 for stream in alice_waiting)
        print(f"\nbob ended {min(s.ended for s in alice_waiting) - bob_waiting.ended:.2f} s before alice's first waiting request")
        assert bob_waiting.ended < min(stream.ended for stream in alice_waiting), "bob should have had the next turn"
    finally:
        for stream in streams:
            stream.close()
        app.stop()
