"""The retrieve step: the top-``k`` hybrid passages for the analysed question, passages of one document merged
where they overlap (:func:`merge_same_document`). Whether they answer is the model's judgement
(:mod:`~citerag.service.answering.recipes`).

A follow-up keeps the documents the previous answer cited as candidates
(:func:`~citerag.service.conversation.keep_candidates`), and a comparison that names a paper retrieval missed gets
that paper's best passage (the rule ``named_papers``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from citerag.index.backend import Searcher
from citerag.index.filters import Filters
from citerag.index.search import SearchResult
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.names import named_documents
from citerag.service.answering.question import Question
from citerag.service.answering.types import Trace
from citerag.service.conversation import keep_candidates

#: How deep a paper's name is searched for when a comparison names a paper retrieval missed (a name of common
#: words ranks its own paper below titles that share its words).
NAME_SEARCH_K = 20


def merge_same_document(results: list[SearchResult]) -> list[SearchResult]:
    """Group ``results`` by document (documents in order of their best rank), sort each document's passages by
    position, and merge passages that overlap or touch into one.

    A merged result spans ``start`` of the first to ``end`` of the last passage (``text`` is that slice of the
    document, so ``document.text[start:end] == passage.text`` still holds); its ``chunk_id`` joins the merged ids
    with ``+``, its ranks and scores are the best of its parts. ``rank`` is renumbered ``1..n`` in the new order,
    e.g. ``[A#2, B#0, A#1]`` with A#1 and A#2 overlapping gives ``[A#1+2, B#0]``. The chunker overlaps neighbours
    by up to 64 word pieces, so unmerged neighbours would repeat that text to the model.
    """
    by_doc: dict[str, list[SearchResult]] = {}
    for result in results:
        by_doc.setdefault(result.passage.doc_id, []).append(result)
    merged: list[SearchResult] = []
    for group in by_doc.values():
        group.sort(key=lambda r: r.passage.start)
        current = group[0]
        for result in group[1:]:
            if result.passage.start <= current.passage.end:
                current = _join(current, result)
            else:
                merged.append(current)
                current = result
        merged.append(current)
    return [result.replace(rank=rank) for rank, result in enumerate(merged, start=1)]


def _best(values: tuple[float | int | None, ...], pick) -> float | int | None:  # noqa: ANN001 - min or max
    present = [v for v in values if v is not None]
    return pick(present) if present else None


def _join(a: SearchResult, b: SearchResult) -> SearchResult:
    start, end = a.passage.start, max(a.passage.end, b.passage.end)
    passage = replace(a.passage, chunk_id=f"{a.passage.chunk_id}+{b.passage.ordinal}", end=end,
                      text=a.document.text[start:end],
                      n_tokens=a.passage.n_tokens + b.passage.n_tokens)  # an upper bound (the overlap counts twice)
    return a.replace(
        passage=passage, rank=min(a.rank, b.rank), score=max(a.score, b.score),
        bm25_rank=_best((a.bm25_rank, b.bm25_rank), min), dense_rank=_best((a.dense_rank, b.dense_rank), min),
        bm25_score=_best((a.bm25_score, b.bm25_score), max), dense_score=_best((a.dense_score, b.dense_score), max),
    )


@dataclass(frozen=True, slots=True)
class Retrieved:
    """What the retrieve step found: the passages, merged by document and numbered ``[1]..[n]``, and why they
    cannot answer (``gap``: none matched; ``""`` when they may)."""

    passages: list[SearchResult]
    gap: str = ""


def retrieve(searcher: Searcher, question: Question, config: AnswerConfig, trace: Trace, k: int | None = None,
             filters: Filters | None = None) -> Retrieved:
    """The passages for ``question`` (module docstring): ``k`` (default ``config.k``) hybrid passages,
    ``filters`` applied inside retrieval.
    """
    results = searcher.search(question.text, k=k or config.k, mode="hybrid", filters=filters)
    if question.keep and "doc_id" not in (filters or {}):
        results = keep_candidates(results, question.keep, lambda ids: searcher.search(
            question.text, k=1, mode="hybrid", filters={**(filters or {}), "doc_id": {"in": ids}}))
    if question.kind == "comparison" and len(question.names) >= 2 and config.rules.named_papers:
        with_named = _with_named(searcher, results, question.names, filters)
        if len(with_named) > len(results):
            trace.acted("named_papers")
        results = with_named
    if not results:
        return Retrieved([], "no passage matched the question")
    return Retrieved(merge_same_document(results))


def _with_named(searcher: Searcher, results: list[SearchResult], names: tuple[str, ...],
                filters: Filters | None) -> list[SearchResult]:
    """``results`` plus the best passage of each paper ``names`` names that they miss, searched by its name among
    the top :data:`NAME_SEARCH_K`."""
    for name in names:
        if named_documents([name], results):
            continue
        hits = searcher.search(name, k=NAME_SEARCH_K, mode="hybrid", filters=filters)
        found = named_documents([name], hits)
        results = [*results, *(h for h in hits if h.document.doc_id in found)][: len(results) + 1]
    return results
