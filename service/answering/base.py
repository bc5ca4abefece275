"""What both answerers share: hybrid retrieval as the model reads it, ``ask`` = retrieve + answer, and the
retrieval-evidence abstention check that runs before the model is called."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from citerag.index.backend import Searcher
from citerag.index.filters import Filters
from citerag.index.search import SearchResult
from citerag.service.answering.types import Answer
from citerag.service.context import merge_same_document
from citerag.service.conversation import keep_candidates


def retrieval_gap(passages: list[SearchResult], min_dense_score: float) -> str:
    """Why ``passages`` cannot answer anything, or ``""``: none were retrieved, or the best cosine similarity to
    the question (``dense_score``) is below ``min_dense_score`` (calibrated on the dev set: off-topic questions
    score 0.13-0.15, the lowest answerable one 0.20)."""
    if not passages:
        return "no passage matched the question"
    best = max((p.dense_score for p in passages if p.dense_score is not None), default=None)
    if best is None or best < min_dense_score:
        return (f"no passage is close enough to the question (best similarity "
                f"{best if best is not None else 0:.3f} < {min_dense_score:.3f})")
    return ""


class RetrievingAnswerer:
    """Base of the answerers: subclasses set ``retriever`` and implement ``answer(question, passages, retrieve_ms,
    on_delta) -> Answer``."""

    retriever: Searcher

    def retrieve(
        self, question: str, k: int, filters: Filters | None = None, keep: Sequence[str] = ()
    ) -> list[SearchResult]:
        """The top-``k`` hybrid passages, passages of one document together and merged where they overlap
        (:func:`citerag.service.context.merge_same_document`), so at most ``k`` blocks.

        Args:
            keep: ids of documents to keep as candidates (a follow-up's previous citations): when none of them is
                retrieved, the best passage among them takes the last slot
                (:func:`citerag.service.conversation.keep_candidates`); ignored when ``filters`` name ``doc_id``.
        """
        results = self.retriever.search(question, k=k, mode="hybrid", filters=filters)
        if keep and "doc_id" not in (filters or {}):
            results = keep_candidates(results, keep, lambda ids: self.retriever.search(
                question, k=1, mode="hybrid", filters={**(filters or {}), "doc_id": {"in": ids}}))
        return merge_same_document(results)

    def ask(
        self,
        question: str,
        k: int = 8,
        on_delta: Callable[[str], bool | None] | None = None,
        filters: Filters | None = None,
        keep: Sequence[str] = (),
    ) -> Answer:
        """Answer ``question`` from the top-``k`` passages, or abstain.

        Args:
            on_delta: receives the answer's text as it becomes visible (streaming); return True to stop.
            filters: metadata conditions applied inside retrieval (:mod:`citerag.index.filters`).
            keep: documents kept as candidates (:meth:`retrieve`).
        """
        started = time.perf_counter()
        passages = self.retrieve(question, k, filters, keep)
        return self.answer(question, passages, (time.perf_counter() - started) * 1000, on_delta)  # type: ignore[attr-defined]
