"""What keeping the chats costs, side by side in one run: the page's reply handler streaming
with the chat store on against off, opening a chat of N messages, and the database's size per
1,000 messages; on SQLite and on PostgreSQL (a throwaway server, where one is installed).

    OMP_WAIT_POLICY=PASSIVE python bench/store.py [--tokens 256] [--rounds 3] [--messages 1000]

Streaming: ChatHandlers.send (what the page runs for Enter) on the embedded model, greedy, the
same request each way, rounds rotating which way goes first; reported as the reply's tokens
over the handler's whole time (so the store's saves, at the message and every 2 s of the reply
and at its end, are inside it), and the ratio to the store off; the process's CPU time per
token (steadier than wall-clock on a shared machine); and the saves themselves: how many, the
milliseconds they took in all (in a thread, beside the stream), and that as a share of the reply. It is the handler's rate, not
Chromium's (bench/ui_stream.py measures what the browser shows; the store adds nothing there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gradio.utils import get_upload_folder  # noqa: E402
from sqlalchemy import text  # noqa: E402

from chat.saved_chats import SavedChats  # noqa: E402
from chat.session import ChatSession  # noqa: E402
from chat.turns import Turn  # noqa: E402
from engines import LoadedModels  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.postgres import fresh_database, postgres_bin, postgres_server  # noqa: E402
from store import MessageTree, open_store  # noqa: E402
from webui.chat_view import render  # noqa: E402
from webui.handlers import ChatHandlers  # noqa: E402

QUESTION = "Write a long story about a lighthouse keeper and a storm."
CONTROLS = ("temperature", "top_p", "top_k", "max_new_tokens", "repetition_penalty", "seed", "skip_special_tokens", "enable_thinking")
OWNER = "login:bench"


def greedy(tokens: int) -> dict:
    return {"system": "", "tools": "", "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": tokens,
            "repetition_penalty": 1.0, "seed": None, "skip_special_tokens": True, "enable_thinking": True}


async def streamed(handlers: ChatHandlers, session: ChatSession, tokens: int) -> tuple[float, float, int, float]:
    """One reply through the page's handler: its tokens per second start to end, the process's
    CPU ms per token, and how many saves it made and the ms they took in all."""
    saves: list[float] = []
    if session.keeper is not None:
        save = session.keeper.save

        def timed_save(*args, **kwargs):
            started = time.perf_counter()
            save(*args, **kwargs)
            saves.append(time.perf_counter() - started)

        session.keeper.save = timed_save
    started, cpu_started = time.perf_counter(), time.process_time()
    async for _ in handlers.send(session, {"text": QUESTION, "files": []}, **greedy(tokens)):
        pass
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    count = session.turns[-1].stats.tokens
    return count / elapsed, cpu * 1000 / count, len(saves), sum(saves) * 1000


def chat_of(length: int) -> MessageTree[Turn]:
    """A conversation of ``length`` messages of a few sentences each."""
    sentence = "The keeper climbed the stairs and lit the lamp before the storm came in from the sea. "
    return MessageTree.line([Turn(role=("user", "assistant")[i % 2], content=f"{i}: " + sentence * (1 + i % 4)) for i in range(length)])


def database_bytes(store) -> int:
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "postgresql":
            return connection.execute(text("SELECT pg_total_relation_size('messages') + pg_total_relation_size('chats')")).scalar()
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
        return pages * connection.exec_driver_sql("PRAGMA page_size").scalar()


def opening(store, messages: int, rounds: int, upload_folder: str) -> tuple[float, float, int]:
    """Median ms to write a chat of ``messages`` messages at once, median ms to open it (read
    and render), and the database's growth in bytes per 1,000 messages."""
    chats = SavedChats(store, OWNER, upload_folder=get_upload_folder())
    before = database_bytes(store)
    writes, opens = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        chat = chats.add(chat_of(messages))
        writes.append(time.perf_counter() - started)
    grown = (database_bytes(store) - before) / rounds
    for _ in range(rounds):
        started = time.perf_counter()
        session = chats.open(chat.chat_id, upload_folder)
        render(session.tree)
        opens.append(time.perf_counter() - started)
        assert len(session.turns) == messages
    return statistics.median(writes) * 1000, statistics.median(opens) * 1000, int(grown * 1000 / messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="anychat-bench-store-"))
    upload_folder = str(folder / "gradio")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        stores = {"SQLite": open_store(f"sqlite:///{folder / 'chats.db'}", data=folder)}
        if postgres_bin() is not None:
            server = stack.enter_context(postgres_server())
            stores["PostgreSQL"] = open_store(fresh_database(server.url), data=folder)
        else:
            print("PostgreSQL is not installed (apt-get install -y postgresql): SQLite only.")
        for store in stores.values():
            stack.callback(store.close)

        loaded_models = LoadedModels()
        loaded_models.load({})
        stack.callback(loaded_models.unload)
        handlers = ChatHandlers(loaded_models, CONTROLS)
        ways = {"store off": lambda: ChatSession(), **{f"store on ({name})": SavedChats(store, OWNER, upload_folder=get_upload_folder()).new_session for name, store in stores.items()}}
        asyncio.run(streamed(handlers, ChatSession(), 8))  # warm-up
        rates: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in ways}
        names = list(ways)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                rates[name].append(asyncio.run(streamed(handlers, ways[name](), args.tokens)))

        print(f"streaming through the page's handler: {loaded_models.describe()} greedy, {args.tokens} new tokens, median of {args.rounds} "
              f"rotated rounds; load average {os.getloadavg()[0]:.1f}")
        off_rate = statistics.median(rate for rate, *_ in rates["store off"])
        off_cpu = statistics.median(cpu for _, cpu, *_ in rates["store off"])
        streaming = []
        for name, runs in rates.items():
            rate, cpu = statistics.median(r for r, *_ in runs), statistics.median(c for _, c, *_ in runs)
            saves, saving = statistics.median(n for *_, n, _ in runs), statistics.median(ms for *_, ms in runs)
            share = statistics.median(ms / (args.tokens / r * 1000) for r, _, _, ms in runs)
            streaming.append([name, f"{rate:.2f}", f"{rate / off_rate:.3f}", f"{cpu:.2f}", f"{cpu / off_cpu:.3f}", f"{saves:.0f}", f"{saving:.1f}",
                              f"{share:.2%}"])
        print(markdown_table(["way", "tok/s", "ratio", "CPU ms/tok", "CPU ratio", "saves", "ms saving", "of reply"], streaming))
        print()
        print(f"a chat of {args.messages} messages, median of {args.rounds}")
        opened = []
        for name, store in stores.items():
            write, open_, size = opening(store, args.messages, args.rounds, upload_folder)
            opened.append([name, f"{write:.1f}", f"{open_:.1f}", f"{size:,}"])
        print(markdown_table(["database", "write ms", "open ms", "bytes per 1,000 messages"], opened))


if __name__ == "__main__":
    main()
