"""A document put in its owner's library, and the passages of their documents a question is most
about: found by its words (the database's full-text index, BM25) and by its meaning (the
embeddings), the two rankings fused by reciprocal rank (Cormack et al., 2009), which needs no
weights to tune between scores of different kinds."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from engines.prompt.documents import Document
from store import DocumentLibrary, FoundPassage, LibraryEntry

from .embedder import embed, embed_question
from .passages import split_passages

# How many of each ranking take part in the fusion; its constant (the paper's 60).
CANDIDATES = 50
FUSION_K = 60
Ranking = Literal["hybrid", "keyword", "vector"]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kept(library: DocumentLibrary, owner: str, document: Document, progress: Callable[[int, int], None] = lambda done, total: None,
         cancelled: Callable[[], bool] = lambda: False) -> LibraryEntry:
    """The document in ``owner``'s library: found where they attached the same text before, else
    split, embedded (``progress`` told passages done and their total; embedder.Cancelled where
    ``cancelled`` says so) and kept. Blocks for seconds to minutes: call it off the event loop."""
    sha256 = text_hash("\f".join(document.pages))
    found = library.find(owner, sha256)
    if found is not None:
        return found
    passages = split_passages(document)
    progress(0, len(passages))
    vectors = embed([passage.for_search() for passage in passages], lambda done: progress(done, len(passages)), cancelled)
    return library.add(owner, document.name, document.summary(), sha256, passages, vectors)


def search(library: DocumentLibrary, owner: str, document_ids: Sequence[str], question: str, count: int,
           ranking: Ranking = "hybrid") -> list[FoundPassage]:
    """The ``count`` passages of these documents of ``owner``'s that ``question`` is most about, best first."""
    keyword = library.keyword_ranked(owner, document_ids, question, CANDIDATES) if ranking != "vector" else []
    by_meaning: list[int] = []
    if ranking != "keyword":
        ids, vectors = library.vectors(owner, document_ids)
        if len(ids):
            scores = vectors @ embed_question(question)
            by_meaning = ids[np.argsort(-scores)[:CANDIDATES]].tolist()
    return library.passages(owner, fused(keyword, by_meaning)[:count])


def fused(*rankings: Sequence[int]) -> list[int]:
    """Reciprocal rank fusion: each item scores 1 / (FUSION_K + its rank) in each ranking it is in."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (FUSION_K + rank)
    return sorted(scores, key=lambda item: -scores[item])
