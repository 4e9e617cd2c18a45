"""Each user's library: documents too long for a model's context, kept as passages with their
embeddings, and searched two ways in the database itself: full text (SQLite's FTS5 and its BM25,
PostgreSQL's tsvector and ts_rank, weighted by how rare each word is) and by meaning (the vectors, compared in numpy: a document
of 500 pages is some 1,500 passages, 2.3 MB of vectors, read and compared in milliseconds, so no
vector index is needed at this size). Every call names its owner and touches only their documents:
another user's document id reads as no document at all."""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from sqlalchemy import Engine, bindparam, delete, select, text
from sqlalchemy.orm import Session

from .quota import Quota
from .tables import LibraryDocument, LibraryPassage

# Words too common to tell passages apart: a question's "what is the" would match every passage.
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its of on or that the their there this to was "
    "what when where which who why will with you your".split()
)


class PassageLike(Protocol):
    ordinal: int
    page: int | None
    heading: str
    text: str


@dataclass(frozen=True)
class LibraryEntry:
    id: str
    name: str
    summary: str
    characters: int
    created: float


@dataclass(frozen=True)
class FoundPassage:
    """A passage as search finds it: ``id`` its row, ``name`` its document's."""

    id: int
    document_id: str
    name: str
    ordinal: int
    page: int | None
    heading: str
    text: str


class DocumentLibrary:
    """``text_used``: the characters ``owner``'s chats, presets and library hold (ChatStore's
    count), held to ``quota.text``."""

    def __init__(self, engine: Engine, quota: Quota, text_used: Callable[[Session, str], int]) -> None:
        self.engine = engine
        self.quota = quota
        self.text_used = text_used

    def find(self, owner: str, sha256: str) -> LibraryEntry | None:
        """The owner's document of this text, kept before."""
        with Session(self.engine) as session:
            row = session.scalars(select(LibraryDocument).where(LibraryDocument.owner == owner, LibraryDocument.sha256 == sha256)).first()
            return _entry(row) if row else None

    def documents(self, owner: str) -> list[LibraryEntry]:
        with Session(self.engine) as session:
            rows = session.scalars(select(LibraryDocument).where(LibraryDocument.owner == owner).order_by(LibraryDocument.created.desc()))
            return [_entry(row) for row in rows]

    def add(self, owner: str, name: str, summary: str, sha256: str, passages: Sequence[PassageLike], vectors: np.ndarray) -> LibraryEntry:
        """Keep the document, its passages and their vectors; an OverQuota (nothing kept) where its
        text would take the owner past their quota."""
        characters = sum(len(passage.text) for passage in passages)
        with Session(self.engine) as session, session.begin():
            row = LibraryDocument(id=uuid.uuid4().hex, owner=owner, name=name[:300], summary=summary[:200], sha256=sha256,
                                  characters=characters, created=time.time())
            session.add(row)
            session.flush()
            self.quota.check_text(self.text_used(session, owner), characters)
            session.execute(LibraryPassage.__table__.insert(), [
                {"document_id": row.id, "ordinal": passage.ordinal, "page": passage.page, "heading": passage.heading,
                 "text": passage.text, "vector": np.asarray(vector, dtype=np.float32).tobytes()}
                for passage, vector in zip(passages, vectors)
            ])
            return _entry(row)

    def delete(self, owner: str, document_id: str) -> bool:
        """Delete the document with its passages, their vectors and their place in the index."""
        with Session(self.engine) as session, session.begin():
            if not self._owns(session, owner, [document_id]):
                return False
            session.execute(delete(LibraryPassage).where(LibraryPassage.document_id == document_id))
            session.execute(delete(LibraryDocument).where(LibraryDocument.id == document_id))
            return True

    def keyword_ranked(self, owner: str, document_ids: Sequence[str], question: str, limit: int) -> list[int]:
        """The ids of the passages of these documents that the question's words find, best first (BM25)."""
        words = [word for word in re.findall(r"\w+", question.lower()) if word not in _STOPWORDS]
        if not words:
            return []
        with Session(self.engine) as session:
            owned = self._owns(session, owner, document_ids)
            if not owned:
                return []
            if self.engine.dialect.name == "postgresql":
                return _postgresql_ranked(session, owned, words, limit)
            query = text("SELECT p.id FROM library_passages_fts f JOIN library_passages p ON p.id = f.rowid "
                         "WHERE library_passages_fts MATCH :words AND p.document_id IN :ids "
                         "ORDER BY bm25(library_passages_fts) LIMIT :limit").bindparams(bindparam("ids", expanding=True))
            return list(session.scalars(query, {"words": " OR ".join(f'"{word}"' for word in words), "ids": owned, "limit": limit}))

    def vectors(self, owner: str, document_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The passages' ids and their vectors (a row each) of these documents."""
        with Session(self.engine) as session:
            owned = self._owns(session, owner, document_ids)
            rows = session.execute(select(LibraryPassage.id, LibraryPassage.vector).where(LibraryPassage.document_id.in_(owned))).all()
        ids = np.array([row.id for row in rows], dtype=np.int64)
        matrix = np.frombuffer(b"".join(row.vector for row in rows), dtype=np.float32).reshape(len(rows), -1) if rows else np.zeros((0, 0), np.float32)
        return ids, matrix

    def passages(self, owner: str, passage_ids: Sequence[int]) -> list[FoundPassage]:
        """These passages, in the order given, of the owner's documents only."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(LibraryPassage, LibraryDocument.name).join(LibraryDocument, LibraryDocument.id == LibraryPassage.document_id)
                .where(LibraryPassage.id.in_(list(passage_ids)), LibraryDocument.owner == owner)
            ).all()
        found = {passage.id: FoundPassage(passage.id, passage.document_id, name, passage.ordinal, passage.page, passage.heading, passage.text)
                 for passage, name in rows}
        return [found[id_] for id_ in passage_ids if id_ in found]

    def in_order(self, owner: str, document_id: str, count: int | None = None) -> list[FoundPassage]:
        """A document's passages in their order (its first ``count``, where given)."""
        with Session(self.engine) as session:
            query = (select(LibraryPassage.id).where(LibraryPassage.document_id.in_(self._owns(session, owner, [document_id])))
                     .order_by(LibraryPassage.ordinal))
            ids = list(session.scalars(query.limit(count) if count is not None else query))
        return self.passages(owner, ids)

    @staticmethod
    def _owns(session: Session, owner: str, document_ids: Sequence[str]) -> list[str]:
        return list(session.scalars(select(LibraryDocument.id).where(LibraryDocument.owner == owner, LibraryDocument.id.in_(list(document_ids)))))


def _postgresql_ranked(session: Session, document_ids: list[str], words: list[str], limit: int) -> list[int]:
    """PostgreSQL's ts_rank counts how often the words occur but not how rare each is, so a word
    every passage has ("nest", in a report on seabirds) outweighed the one that tells the passage
    apart ("razorbill"): each word's rank is weighted by its inverse document frequency among
    these documents' passages, as BM25 weighs it."""
    ids = bindparam("ids", expanding=True)
    total = session.scalar(text("SELECT count(*) FROM library_passages WHERE document_id IN :ids").bindparams(ids), {"ids": document_ids})
    weights = []
    for word in words:
        having = session.scalar(text("SELECT count(*) FROM library_passages WHERE document_id IN :ids AND "
                                     "search @@ plainto_tsquery('english', :word)").bindparams(ids), {"ids": document_ids, "word": word})
        weights.append(math.log(1 + (total - having + 0.5) / (having + 0.5)))
    score = " + ".join(f"{weight!r} * ts_rank(p.search, plainto_tsquery('english', :w{index}))" for index, weight in enumerate(weights))
    query = text(f"SELECT p.id FROM library_passages p WHERE p.document_id IN :ids AND p.search @@ websearch_to_tsquery('english', :words) "
                 f"ORDER BY {score} DESC LIMIT :limit").bindparams(ids)
    found = session.scalars(query, {"ids": document_ids, "words": " or ".join(words), "limit": limit,
                                    **{f"w{index}": word for index, word in enumerate(words)}})
    return list(found)


def _entry(row: LibraryDocument) -> LibraryEntry:
    return LibraryEntry(row.id, row.name, row.summary, row.characters, row.created)
