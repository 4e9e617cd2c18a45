"""Isolation between sessions (issue 12): 8 browser sessions chatting at once, with greedy settings,
each get token for token the reply their conversation gets when it is sent alone. 0 cross-talk,
on the HF and on the vLLM backend, against the real `python app.py` in a real Chromium.

Each session is its own browser context (its own Gradio session state and saved chats: 8 users)
with its own system prompt and its own earlier turn, so a leak of history or system prompt
between sessions would change a reply. The question of each session is first sent
alone, one session after another; then it is taken back (Undo) and sent again in all 8 at once.

What overlaps is checked, so a test that ran the 8 one by one could not pass unnoticed: every
session's reply is in flight (its Stop button shown) before any of them has finished. Then:
- huggingface, with --max-concurrent 2: two requests generate at once, each in its own thread
  over the one shared model, and the waiting line (engines/waiting_line.py) holds the other six,
  whose pages say "Waiting for the model: N ahead", N from 1 to 6.
- vllm, with --max-concurrent 8: all 8 are admitted at once and batched by vLLM, so no page
  waits and each reply shows its first words before any of them ends. vLLM runs in float32 here:
  in bf16 a batch can round differently from a lone request, and greedy decoding then picks the
  other token at a near-tie (see test_bf16_greedy_parity_differs_only_at_near_ties in
  tests/test_vllm_engine.py). In bf16, 4 of these 8 questions got another reply at once than
  alone (the same 4 in three runs), each at a near-tie: in HF's own bf16 forward pass the two
  tokens' logits were equal or one bf16 step apart (10.31/10.31, 11.31/11.19, 21.25/21.0, 15.5/15.44).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.browser import CHROMIUM, AppProcess, LoadWatch, bot_messages, user_messages, wait_until_ready
from harness.vllm_settings import VLLM

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.vllm]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)

BROWSER_WAIT_MS = 180_000  # on a busy 2-core machine one request can wait behind seven others
# Long enough that each session's reply is its own from its first words (asserted below).
MAX_NEW_TOKENS = 16
# Logprobs (nats) this close are a tie that another kernel's rounding can tip.
NEAR_TIE = 0.05
# Per page after the first, how far ahead of now send_to_all sets the moment its pages send together:
# about what handing a page that moment takes on a busy machine (a page handed it late sends at once).
SEND_LEAD_MS = 250


@dataclass(frozen=True)
class User:
    """One session's conversation. ``name`` and ``topic`` are its own words: no other session's
    prompts hold them, so seeing them in another session's reply or history is cross-talk."""

    name: str
    topic: str
    system: str
    first: str
    question: str


USERS = [
    User(name, topic, f"You are a friendly guide who loves {topic}. Answer in two or three sentences.",
         f"Hello, my name is {name}.", f"{name} here again: what should a beginner know about {topic}?")
    for name, topic in [
        ("Ingrid", "lighthouses"), ("Tobias", "beekeeping"), ("Marisol", "volcanoes"), ("Kenji", "chess"),
        ("Olufemi", "sourdough"), ("Svetlana", "glaciers"), ("Radek", "origami"), ("Priya", "saxophones"),
    ]
]

# Per page: the span of each reply (Stop shown until hidden, in ms of the shared clock) with the
# moment its first words were shown, and the most requests the page was told were ahead of it in
# the waiting line.
WATCH_REPLIES = """() => {
    window.spans = [];
    window.mostAhead = 0;
    let shown = false, repliesBefore = 0;
    const replies = () => [...document.querySelectorAll("#chatbot [data-testid=bot]")].filter(m => !m.querySelector(".reply-stats, .versions"));
    new MutationObserver(() => {
        const stop = document.querySelector("#stop-btn");
        const now = stop !== null && stop.offsetParent !== null;
        if (now && !shown) {
            window.spans.push([Date.now(), null, null]);
            repliesBefore = replies().length;
        }
        const span = window.spans[window.spans.length - 1];
        if (now && span[2] === null) {
            const written = replies();
            const text = written.length > repliesBefore ? written[written.length - 1].innerText.trim() : "";
            if (text && !/Waiting for the model/.test(text)) span[2] = Date.now();
        }
        if (!now && shown) span[1] = Date.now();
        shown = now;
        const waiting = /Waiting for the model: (\\d+) ahead/.exec(document.querySelector("#chatbot").textContent);
        if (waiting) window.mostAhead = Math.max(window.mostAhead, Number(waiting[1]));
    }).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true,
                               attributeFilter: ["class", "style", "hidden"]});
}"""
TOKENS = re.compile(r"^(?:■ stopped after )?(\d+) tokens")

# Greedy and short, every page alike: set as the app's defaults rather than on each page, where one of
# eight pages set at once on a busy machine once sent the model's default temperature after all.
GREEDY = ("--temperature", "0", "--max-new-tokens", str(MAX_NEW_TOKENS), "--log-requests")
# Each backend's flags, and how many requests it generates at once (--max-concurrent).
BACKENDS = {
    "huggingface": (("--backend", "huggingface", "--max-concurrent", "2", *GREEDY), 2),
    # The shared vLLM settings (the app takes vLLM's serving settings in --engine-args), in
    # float32 (see the module's note).
    "vllm": (("--backend", "vllm", "--dtype", "float32", "--max-concurrent", str(VLLM["max_concurrent"]), *GREEDY,
              "--engine-args", json.dumps({"max_model_len": VLLM["max_model_len"], "kv_cache_memory_bytes": VLLM["kv_cache_space_gb"] << 30})),
             VLLM["max_concurrent"]),
}


@pytest.fixture(scope="module", params=list(BACKENDS))
def app(request, tmp_path_factory):
    """One app per backend, the HF one stopped before vLLM starts."""
    flags, slots = BACKENDS[request.param]
    process = AppProcess(tmp_path_factory.mktemp(request.param), flags, timeout=420)
    yield request.param, process, slots
    process.stop()


@pytest.fixture
def pages(app, browser):
    """A page per user, in a context of its own, with the user's system prompt. The pages open one
    after another, each ready before the next: eight opened at once asked the server for about 800
    files together, and in a CI run beside two other heavy jobs one of them still showed Gradio's
    "Loading..." three minutes later."""
    _, process, _ = app
    contexts = [browser.new_context(viewport={"width": 1280, "height": 900}) for _ in USERS]
    pages = [context.new_page() for context in contexts]
    for page, user in zip(pages, USERS):
        watch = LoadWatch(page)
        page.goto(process.url, wait_until="commit")
        try:
            wait_until_ready(page, watch)
        except AssertionError as error:
            raise AssertionError(f"{error}\nThe app's log ends: {process.log()[-4000:]}") from None
        page.evaluate(WATCH_REPLIES)
        page.locator("#system-prompt textarea").fill(user.system)
    yield pages
    for context in contexts:
        context.close()


def spans(page) -> list[list[int | None]]:
    return page.evaluate("window.spans")


def wait_for_replies(page, count: int) -> None:
    """Until the page has finished ``count`` replies."""
    page.wait_for_function(f"window.spans.length >= {count} && window.spans[{count - 1}][1] !== null", timeout=BROWSER_WAIT_MS)


def last_reply(page) -> tuple[str, int]:
    """The last reply's text, and its length in tokens from the stats line under it."""
    text = bot_messages(page).last.inner_text().strip()
    match = TOKENS.match(page.locator("#chatbot .reply-stats").last.inner_text().strip())
    assert match, "the reply has no stats line"
    return text, int(match[1])


def lone_reply(process: AppProcess, user: User) -> dict:
    """The greedy reply to ``user``'s question, asked alone through the app's API with the
    session's exact earlier turn (from the chat store), with each token's two likeliest tokens:
    OpenAI's choice object."""
    with sqlite3.connect(process.log_path.parent / "data" / "chats.db") as database:
        [(chat_id,)] = database.execute("SELECT id FROM chats WHERE title = ?", (user.first,)).fetchall()
        first, earlier = [content for (content,) in database.execute("SELECT content FROM messages WHERE chat_id = ? ORDER BY id LIMIT 2", (chat_id,))]
    messages = [{"role": "system", "content": user.system}, {"role": "user", "content": first}, {"role": "assistant", "content": earlier},
                {"role": "user", "content": user.question}]
    model = httpx.get(f"{process.url}v1/models", timeout=60).json()["data"][0]["id"]
    answer = httpx.post(f"{process.url}v1/chat/completions", timeout=300, json={
        "model": model, "messages": messages, "temperature": 0, "max_tokens": MAX_NEW_TOKENS, "logprobs": True, "top_logprobs": 2})
    [choice] = answer.json()["choices"]
    return choice


def logged_prompts(process: AppProcess, user: User) -> list[str]:
    """The requests that asked ``user``'s question, as the app logged them (--log-requests): the
    page's alone, the page's at once, then the API's."""
    return [line.split(" request ", 1)[1] for line in process.log().splitlines() if " request from " in line and user.question in line]


def parting(lone: dict, at_once: str) -> tuple[str, float] | None:
    """Where ``at_once`` parts from the ``lone`` reply, if it took the lone reply's second likeliest
    token there: the place in words, and how far apart (in logprob) the two likeliest tokens were."""
    written = ""
    for token in lone["logprobs"]["content"]:
        if not words(at_once).startswith(words(written + token["token"])):
            best, second = token["top_logprobs"]
            if words(at_once).startswith(words(written + second["token"])):
                return (f"at {written!r}, {best['token']!r} ({best['logprob']:.5f}) against {second['token']!r} ({second['logprob']:.5f})",
                        best["logprob"] - second["logprob"])
            return None
        written += token["token"]
    return None


def words(text: str) -> str:
    """``text`` with its spacing as the page shows it."""
    return " ".join(text.split())


def send_to_all(pages, texts) -> None:
    """Send each page its text, all at once: the boxes are filled first, then every page clicks its
    send button at one moment of the clock the pages share, set about far enough ahead that each
    page has it before it comes. (Enter pressed in one page after another spread the 8 sends over 5.5 s on a
    busy machine, longer than a vLLM reply takes, so the replies did not overlap.)"""
    for page, text in zip(pages, texts):
        page.locator("#chat-input textarea").fill(text)
    send_at = time.time() * 1000 + SEND_LEAD_MS * (len(pages) - 1)
    for page in pages:
        page.evaluate("""sendAt => setTimeout(() => document.querySelector("#chat-input [data-testid=submit-button]").click(),
                                                sendAt - Date.now())""", send_at)


def test_eight_sessions_at_once_get_the_replies_they_get_alone(app, pages):
    backend, process, slots = app
    # Each user's earlier turn, for history (all at once: only the next reply is compared).
    send_to_all(pages, [user.first for user in USERS])
    for page in pages:
        wait_for_replies(page, 1)
    earlier = [last_reply(page)[0] for page in pages]
    # Alone: each question, one session after another.
    alone, alone_ms = [], 0
    for page, user in zip(pages, USERS):
        send_to_all([page], [user.question])
        wait_for_replies(page, 2)
        alone.append(last_reply(page))
        start, end, _ = spans(page)[1]
        alone_ms += end - start
    assert len({text for text, _ in alone}) == len(USERS), f"some sessions got the same reply, so a swap would not show: {alone}"

    # Undo takes each question and its reply back, and puts the question back in its box.
    for page, user in zip(pages, USERS):
        page.locator("#undo-btn").click()
        expect(page.locator("#chat-input textarea")).to_have_value(user.question)
        expect(bot_messages(page)).to_have_count(1)
        page.evaluate("window.mostAhead = 0")  # the earlier turns waited in line too
    send_to_all(pages, [user.question for user in USERS])
    for page in pages:
        wait_for_replies(page, 3)
    together = [last_reply(page) for page in pages]
    at_once = [spans(page)[2] for page in pages]
    wall_ms = max(end for _, end, _ in at_once) - min(start for start, _, _ in at_once)
    most_ahead = [page.evaluate("window.mostAhead") for page in pages]

    same = sum(a == t for a, t in zip(alone, together))
    print(f"\n{backend}: {same}/{len(USERS)} replies the same at once as alone (0 cross-talk: {same == len(USERS)}); "
          f"alone one by one {alone_ms / 1000:.1f} s in all, 8 at once {wall_ms / 1000:.1f} s of wall time "
          f"({wall_ms / alone_ms:.2f}×); most requests ahead seen per page: {most_ahead}")

    # The page's lone reply is the API's to the same conversation (what parting reads is that reply).
    assert words(lone_reply(process, USERS[0])["message"]["content"]) == words(alone[0][0])
    for user, (text, tokens), (alone_text, alone_tokens) in zip(USERS, together, alone):
        if (text, tokens) == (alone_text, alone_tokens):
            continue
        # vLLM batches with other kernels than it runs one request with: even in float32 a batch
        # can tip a near-tie the other way (once in six loaded runs). That is no cross-talk, and
        # only that is let pass: the replies part where the lone reply's two likeliest tokens tie.
        lone = lone_reply(process, user)
        api_alone = lone["message"]["content"]
        from_api = parting(lone, text)
        parted = from_api if words(api_alone) == words(alone_text) else None
        tie = backend == "vllm" and parted is not None and parted[1] < NEAR_TIE
        print(f"{user.name}'s reply at once parts from alone: {parted[0] if parted else 'not at the second likeliest token'}")
        alone_prompt, at_once_prompt, *_ = logged_prompts(process, user)
        # What the message adds tells a near-tie (the API's reply is the page's alone, parting at a small gap)
        # from a request that was sent another conversation (the API's reply is the page's at once).
        assert tie, (f"{backend}: {user.name}'s reply at once differs from alone:\nalone:   {alone_text!r} ({alone_tokens} tokens)\n"
                     f"at once: {text!r} ({tokens} tokens)\nthe API alone, on the saved conversation: {api_alone!r}\n"
                     f"parting: {parted}; from the API's reply: {from_api}\nthe page's request alone and at once were the same: {alone_prompt == at_once_prompt}\n"
                     f"alone:   {alone_prompt}\nat once: {at_once_prompt}")
    for page, user, first_reply, (text, _) in zip(pages, USERS, earlier, together):
        logged = logged_prompts(process, user)
        assert len(logged) >= 2 and all(" temperature=0.0 " in line for line in logged), f"not each request logged, and greedy: {logged}"
        # Each session's history holds its own messages, and nobody else's words.
        assert user_messages(page).all_inner_texts() == [user.first, user.question]
        assert [m.strip() for m in bot_messages(page).all_inner_texts()] == [first_reply, text]
        expect(page.locator("#system-prompt textarea")).to_have_value(user.system)
        shown = page.locator("#chatbot").inner_text().lower()
        leaked = [other.name for other in USERS if other != user and (other.name.lower() in shown or other.topic in shown)]
        assert not leaked, f"{backend}: {user.name}'s conversation shows another session's words: {leaked}"

    # They really were in flight together: every reply started before any of them ended.
    assert max(start for start, _, _ in at_once) < min(end for _, end, _ in at_once), f"the 8 replies did not overlap: {at_once}"
    # ``slots`` generate at once; the others were shown their places in line, one behind another:
    # 1, 2, ... up to at most everyone but the running. A place may repeat, and the top be lower,
    # where a reply ended before the last pages sent (the line moved between two joins: seen once
    # under a CPU hog, [0, 0, 1, 2, 3, 3, 4, 5]); the line's exact counts are test_waiting_line's.
    waited = sorted(ahead for ahead in most_ahead if ahead)
    if slots >= len(USERS):
        assert not waited, f"places shown where every request had a slot: {most_ahead}"
    else:
        assert (most_ahead.count(0) >= slots and waited and waited[0] == 1 and waited[-1] <= len(USERS) - slots
                and all(later - earlier in (0, 1) for earlier, later in zip(waited, waited[1:]))), f"not a waiting line: {most_ahead}"
    if backend == "vllm":
        # Batched, the replies are written step by step beside each other: most show their first
        # words before the quickest of them ends, where an engine writing one at a time would have
        # begun that one only. Not all: a page shows words later than the engine writes them (on a
        # busy machine its updates are spaced further apart, chat/streaming.py), and under a CPU hog
        # one reply's first words once showed 0.5 s after another had ended. Nor timed against the
        # replies alone: beside the rest of the suite 8 at once once took 36 s against 15.5 s alone.
        quickest_end = min(end for _, end, _ in at_once)
        begun = sum(first is not None and first < quickest_end for _, _, first in at_once)
        assert begun >= len(at_once) // 2, f"not batched: {begun} of {len(at_once)} replies began before the quickest ended: {at_once}"
    assert "Traceback" not in process.log(), process.log()[-3000:]
