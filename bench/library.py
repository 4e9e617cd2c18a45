"""What answering from passages costs, on this machine: reading a PDF of N printed pages into the
library (text, passages, their embeddings, the store's rows and full-text index), the process's
memory for it, the store's size per 100 pages, a question's search time, and recall@5 of the
three rankings over the fixture of harness/document_corpus.py; on SQLite and on PostgreSQL (a
throwaway server, where one is installed). With --reply-tokens (and llama.cpp installed): a chat
reply's tokens/s on llama.cpp (the embedded SmolLM2) alone, while a document of --pages is
embedded in the server's process at its priority (as the app did before) and while it is embedded
in the low-priority worker (as it is now), with a question's embedding time beside each.

    OMP_WAIT_POLICY=PASSIVE python bench/library.py [--pages 500] [--rounds 3] [--reply-tokens 128]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from sqlalchemy import text  # noqa: E402

from engines.prompt.documents import read_document  # noqa: E402
from harness.document_corpus import FACTS, corpus, handbook_pdf  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.postgres import fresh_database, postgres_bin, postgres_server  # noqa: E402
from library import embedder  # noqa: E402
from library.passages import split_passages  # noqa: E402
from library.retrieval import kept, search  # noqa: E402
from limits import Limits  # noqa: E402
from store import open_store  # noqa: E402

SECTIONS_PER_PAGE = 4
RECALL_AT = 5


def store_bytes(store, sqlite_file: Path | None) -> int:
    if sqlite_file is not None:
        with store.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return sqlite_file.stat().st_size
    with store.engine.connect() as connection:
        return connection.execute(text("SELECT pg_total_relation_size('library_passages') + pg_total_relation_size('library_documents')")).scalar()


def measure(url: str, sqlite_file: Path | None, pages: int, rounds: int, folder: Path) -> tuple[list, dict[str, float]]:
    store = open_store(url, data=folder)
    try:
        data = handbook_pdf(pages * SECTIONS_PER_PAGE, SECTIONS_PER_PAGE)
        empty = store_bytes(store, sqlite_file)
        rss_before = psutil.Process().memory_info().rss
        started = time.perf_counter()
        document = read_document(data, "big.pdf", Limits(max_document_pages=10_000, max_document_characters=10**8))
        read = time.perf_counter() - started
        passages = split_passages(document)
        # The worker started and the model loaded (once a process, for documents and for questions) outside the clock.
        embedder.embed([passages[0].for_search()])
        embedder.embed_question(passages[0].for_search())
        kept_from = time.perf_counter()
        entry = kept(store.library, "login:bench", document)
        indexed = time.perf_counter() - kept_from
        total = read + indexed
        rss_after = psutil.Process().memory_info().rss
        size = store_bytes(store, sqlite_file) - empty
        ids = [entry.id, *(kept(store.library, "login:bench", read_document(data, name, Limits())).id for name, data in corpus().items())]
        times = []
        for _ in range(rounds):
            for fact in FACTS:
                asked = time.perf_counter()
                search(store.library, "login:bench", ids, fact.question, RECALL_AT)
                times.append(time.perf_counter() - asked)
        recall = {}
        for ranking in ("keyword", "vector", "hybrid"):
            hits = [any(fact.answer in " ".join(passage.text.split()) for passage in search(store.library, "login:bench", ids[1:], fact.question,
                                                                                         RECALL_AT, ranking)) for fact in FACTS]
            recall[ranking] = sum(hits) / len(hits)
        row = [store.engine.dialect.name, pages, len(passages), f"{read:.1f}", f"{indexed:.1f}", f"{total:.1f}",
               f"{len(passages) / indexed:.0f}", f"{size / pages * 100 / 2**20:.2f}", f"{statistics.median(times) * 1000:.0f}",
               f"{max(times) * 1000:.0f}", f"{(rss_after - rss_before) / 2**20:.0f}"]
        return row, recall
    finally:
        store.close()


def in_this_process(texts: list[str], progress: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
    """The passages embedded as the app did before its worker: in the server's process, at its
    priority and on all its torch threads, a batch at a time."""
    for start in range(0, len(texts), embedder.BATCH):
        if cancelled():
            return
        embedder._vectors(embedder._model(), texts[start:start + embedder.BATCH])
        progress(start + embedder.BATCH)


def in_the_worker(texts: list[str], progress: Callable[[int], None], cancelled: Callable[[], bool]) -> None:
    with contextlib.suppress(embedder.Cancelled):
        embedder.embed(texts, progress, cancelled)


def reply_while_indexing(pages: int, tokens: int, rounds: int) -> list[list[str]]:
    """A reply's tokens/s and a question's embedding time alone, and while the passages of a PDF of
    ``pages`` are embedded each way; the rounds interleaved, so that the machine's noise hits the
    ways alike. Each reply starts once the embedding has done a batch, and the embedding is
    stopped when the reply ends (a document longer than the reply)."""
    from engines import ChatModel

    passages = split_passages(read_document(handbook_pdf(pages * SECTIONS_PER_PAGE, SECTIONS_PER_PAGE), "big.pdf",
                                            Limits(max_document_pages=10_000, max_document_characters=10**8)))
    texts = [passage.for_search() for passage in passages]
    model = ChatModel({"infer_backend": "llamacpp"})
    ways = {"alone": None, "document embedded in the server's process (before)": in_this_process,
            "document embedded in the low-priority worker (now)": in_the_worker}
    speeds: dict[str, list[float]] = {way: [] for way in ways}
    questions: dict[str, list[float]] = {way: [] for way in ways}
    embedded: dict[str, list[int]] = {way: [] for way in ways}
    try:
        for round_number in range(rounds):
            for way, embedding in ways.items():
                done, stop = [0], threading.Event()
                started = threading.Event()
                if embedding is not None:
                    def progress(count: int) -> None:
                        done[0] = count
                        started.set()

                    indexing = threading.Thread(target=embedding, args=(texts, progress, stop.is_set))
                    indexing.start()
                    started.wait()
                asked = time.perf_counter()
                embedder.embed_question(f"How many days of leave, round {round_number}?")
                questions[way].append(time.perf_counter() - asked)
                conversation = [{"role": "user", "content": f"(Story {round_number}.) Write a long story about a lighthouse keeper."}]
                first, count = None, 0
                for _ in model.stream_chat(conversation, temperature=0, max_new_tokens=tokens):
                    count += 1
                    first = first or time.perf_counter()
                speeds[way].append((count - 1) / (time.perf_counter() - first) if count > 1 else 0.0)
                if embedding is not None:
                    stop.set()
                    indexing.join()
                    embedded[way].append(done[0])
    finally:
        model.close()
    return [[way, str(len(texts)), f"{statistics.median(speeds[way]):.1f}", f"{statistics.median(questions[way]) * 1000:.0f}",
             f"{statistics.median(embedded[way]):.0f}" if embedded[way] else "-"] for way in ways]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=0, help="also measure a llama.cpp reply of this many tokens while indexing")
    args = parser.parse_args()
    if args.reply_tokens and importlib.util.find_spec("llama_cpp") is None:
        parser.error("--reply-tokens measures a llama.cpp reply: install llama.cpp (bash scripts/setup.sh)")
    rows, recalls = [], {}
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        sqlite_file = Path(folder) / "chats.db"
        targets = [(f"sqlite:///{sqlite_file}", sqlite_file)]
        if postgres_bin() is not None:
            targets.append((fresh_database(stack.enter_context(postgres_server()).url), None))
        for url, file in targets:
            row, recall = measure(url, file, args.pages, args.rounds, Path(folder))
            rows.append(row)
            recalls[row[0]] = recall
    print(f"\nA PDF of {args.pages} pages ({SECTIONS_PER_PAGE} sections, some 2,500 characters, a page) read into the library, "
          f"then {len(FACTS)} questions searched {args.rounds} times over it and the three fixture documents:\n")
    print(markdown_table(["database", "pages", "passages", "text read (s)", "passages embedded and kept (s)", "in all (s)", "passages/s",
                          "store MiB per 100 pages", "search median (ms)", "search slowest (ms)", "process RSS grown (MiB)"], rows))
    print(f"\nRecall@{RECALL_AT} over the fixture (20 questions, 3 documents):\n")
    print(markdown_table(["ranking", *recalls], [[ranking, *(f"{recalls[name][ranking]:.2f}" for name in recalls)]
                                                 for ranking in ("keyword", "vector", "hybrid")]))
    if args.reply_tokens:
        rows = reply_while_indexing(args.pages, args.reply_tokens, args.rounds)
        print(f"\nA reply of {args.reply_tokens} tokens on llama.cpp (the embedded SmolLM2), alone and while the passages of a PDF of "
              f"{args.pages} pages are embedded, median of {args.rounds} rounds:\n")
        print(markdown_table(["embedding", "passages", "reply tokens/s", "a question embedded (ms)", "passages embedded during the reply"], rows))
    print(f"\npeak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
