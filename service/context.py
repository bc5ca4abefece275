"""Context selection: the retrieved passages as the model reads them.

Passages of one document are put together in document order, and overlapping or adjacent ones are merged into one
block (the chunker overlaps neighbours by up to 64 word pieces, so two neighbours from one abstract would otherwise
repeat that text in the prompt and cost prompt-evaluation time, ~15-25 ms a token on 2 cores). Documents keep the
order of their best passage's rank.
"""

from __future__ import annotations

from dataclasses import replace

from index.retrieve import SearchResult


def merge_same_document(results: list[SearchResult]) -> list[SearchResult]:
    """Group ``results`` by document (documents in order of their best rank), sort each document's passages by
    position, and merge passages that overlap or touch into one.

    A merged result spans ``start`` of the first to ``end`` of the last passage (``text`` is that slice of the
    document, so ``document.text[start:end] == passage.text`` still holds); its ``chunk_id`` joins the merged ids
    with ``+``, its retrieval ranks and scores are the best of its parts. ``rank`` is renumbered ``1..n`` in
    the new order, e.g. ``[A#2, B#0, A#1]`` with A#1 and A#2 overlapping gives ``[A#1+2, B#0]``.
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
    return [replace(result, rank=rank) for rank, result in enumerate(merged, start=1)]


def _best(a: float | int | None, b: float | int | None, pick) -> float | int | None:  # noqa: ANN001
    values = [v for v in (a, b) if v is not None]
    return pick(values) if values else None


def _join(a: SearchResult, b: SearchResult) -> SearchResult:
    start, end = a.passage.start, max(a.passage.end, b.passage.end)
    passage = replace(
        a.passage,
        chunk_id=f"{a.passage.chunk_id}+{b.passage.ordinal}",
        end=end,
        text=a.document.text[start:end],
        n_tokens=a.passage.n_tokens + b.passage.n_tokens,  # an upper bound (the overlap is counted twice)
    )
    return replace(
        a,
        passage=passage,
        rank=min(a.rank, b.rank),
        score=max(a.score, b.score),
        bm25_rank=_best(a.bm25_rank, b.bm25_rank, min),
        dense_rank=_best(a.dense_rank, b.dense_rank, min),
        bm25_score=_best(a.bm25_score, b.bm25_score, max),
        dense_score=_best(a.dense_score, b.dense_score, max),
    )
