"""The retrieve step: the top-``k`` hybrid passages for the analysed question, passages of one document merged
where they overlap (:func:`merge_same_document`), and the check that retrieval found anything close enough to
answer from (:func:`retrieval_gap`).
"""

from __future__ import annotations

from dataclasses import replace

from citerag.index.backend import Searcher
from citerag.index.search import SearchResult
from citerag.service.answering.evidence import within
from citerag.service.answering.names import mentions, named_documents
from citerag.service.answering.state import AnswerState
from citerag.service.conversation import keep_candidates

#: Abstain before the model is asked when the best passage's cosine similarity to the question is below this
#: (calibrated on the dev set: off-topic questions score 0.13-0.15, the lowest answerable one 0.20).
MIN_DENSE_SCORE = 0.18
#: How many passages a paper's name is searched for, when a comparison names a paper retrieval missed. A name of
#: common words ranks its own paper low: over the 22,981 ML abstracts, "Error Encoding Networks" finds "Prediction
#: Under Uncertainty with Error Encoding Networks" 6th (hybrid; BM25 7th), behind titles with "encoding" and
#: "networks" (ML dev set ml005). A search of 20 costs a few ms.
NAME_SEARCH_K = 20
#: The paper an answer is about (the best passage's, and each the question names) is read whole when its text is at
#: most this many characters (an abstract is 1-3 passages of 256 word pieces; a full paper is left to retrieval):
#: the sentence that holds the asked-for fact is often in a passage the question's wording did not retrieve ("What
#: caricature dataset was AdsSe-GAN evaluated on?" retrieves the passage that introduces AdsSe-GAN; "WebCaricature"
#: is in the abstract's last). Parent-document retrieval: search small passages, read their document.
WHOLE_DOCUMENT_CHARS = 4000


def merge_same_document(results: list[SearchResult]) -> list[SearchResult]:
    """Group ``results`` by document (documents in order of their best rank), sort each document's passages by
    position, and merge passages that overlap or touch into one.

    A merged result spans ``start`` of the first to ``end`` of the last passage (``text`` is that slice of the
    document, so ``document.text[start:end] == passage.text`` still holds); its ``chunk_id`` joins the merged ids
    with ``+``, its retrieval ranks and scores are the best of its parts. ``rank`` is renumbered ``1..n`` in
    the new order, e.g. ``[A#2, B#0, A#1]`` with A#1 and A#2 overlapping gives ``[A#1+2, B#0]``. The chunker
    overlaps neighbours by up to 64 word pieces, so unmerged neighbours would repeat that text to the model.
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
    return a.replace(
        passage=passage,
        rank=min(a.rank, b.rank),
        score=max(a.score, b.score),
        bm25_rank=_best(a.bm25_rank, b.bm25_rank, min),
        dense_rank=_best(a.dense_rank, b.dense_rank, min),
        bm25_score=_best(a.bm25_score, b.bm25_score, max),
        dense_score=_best(a.dense_score, b.dense_score, max),
    )


def retrieval_gap(passages: list[SearchResult], min_dense_score: float) -> str:
    """Why ``passages`` cannot answer anything, or ``""``: none were retrieved, or the best cosine similarity to
    the question (``dense_score``) is below ``min_dense_score``."""
    if not passages:
        return "no passage matched the question"
    best = max((p.dense_score for p in passages if p.dense_score is not None), default=None)
    if best is None or best < min_dense_score:
        return (f"no passage is close enough to the question (best similarity "
                f"{best if best is not None else 0:.3f} < {min_dense_score:.3f})")
    return ""


class Retrieve:
    """Retrieve the passages for ``state.info.text`` (``state.k`` of them, ``state.filters`` applied inside
    retrieval), emit them (``"passages"``), and abstain when retrieval found nothing close
    (:func:`retrieval_gap`), unless a retrieved passage holds a name the question gives (as whole words): a short
    question about a name ("What does BAPO stand for?", cosine 0.135 to its best passage) is close to nothing but
    its name.

    The paper the answer is about (the best passage's document, and each the question names) is read whole when
    it is as short as an abstract (:data:`WHOLE_DOCUMENT_CHARS`): its passages the question did not retrieve are
    added and merged with the retrieved ones, and ``state.retrieved`` keeps what was retrieved (the evidence is
    ranked from that; the rest only answers a rule's need: :class:`~citerag.service.answering.evidence.
    SelectEvidence`).

    A comparison that names two or more papers gets each named paper: a name that names none of the retrieved
    documents (:func:`~citerag.service.answering.names.named_documents`) is searched on its own, and the best
    passage of the document it names (among that search's top :data:`NAME_SEARCH_K`) is added.

    A follow-up keeps the documents the previous answer cited as candidates: when none of them is retrieved, the
    best passage among them takes the last slot (:func:`~citerag.service.conversation.keep_candidates`; not when
    the filters name ``doc_id``).

    Args:
        searcher: a :class:`~citerag.index.retrieve.Retriever` or a backend.
        min_dense_score: the retrieval gap's threshold (cosine similarity).
    """

    name = "retrieve"

    def __init__(self, searcher: Searcher, min_dense_score: float = MIN_DENSE_SCORE) -> None:
        self.searcher = searcher
        self.min_dense_score = min_dense_score

    def _with_named(self, results: list[SearchResult], names: tuple[str, ...], filters) -> list[SearchResult]:  # noqa: ANN001
        """``results`` plus the best passage of each paper ``names`` names that they miss (class docstring)."""
        for name in names:
            if named_documents([name], results):
                continue
            hits = self.searcher.search(name, k=NAME_SEARCH_K, mode="hybrid", filters=filters)
            found = named_documents([name], hits)
            results = [*results, *(h for h in hits if h.document.doc_id in found)][: len(results) + 1]
        return results

    def _with_mentioned(
        self, results: list[SearchResult], names: tuple[str, ...], filters,  # noqa: ANN001 - Filters | None
    ) -> list[SearchResult]:
        """``results`` plus, for each of ``names`` that no passage of them mentions, the best BM25 passage that
        does, ranked after them (class docstring)."""
        for name in names:
            if any(mentions(result.passage.text, name) for result in results):
                continue
            hit = next((h for h in self.searcher.search(name, k=NAME_SEARCH_K, mode="bm25", filters=filters)
                        if mentions(h.passage.text, name)), None)
            if hit is not None:
                results = [*results, hit.replace(rank=len(results) + 1)]
        return results

    def _unretrieved(self, merged: list[SearchResult], names: tuple[str, ...], question: str,
                     filters) -> list[SearchResult]:  # noqa: ANN001 - Filters | None
        """The passages ``merged`` (retrieved, merged by document) miss of the documents read whole: the best
        passage's and each that ``names`` name, when at most :data:`WHOLE_DOCUMENT_CHARS` long and not all retrieved
        already; from a backend's ``passages_of``, which costs no search (~0.1 ms against ~100 ms for a filtered
        search over the 22,981 ML abstracts), else one search restricted to them; ranked after ``merged``."""
        if not merged:
            return []
        docs = {merged[0].document.doc_id, *named_documents(names, merged)}
        whole = list(dict.fromkeys(
            result.document.doc_id for result in merged
            if result.document.doc_id in docs and len(result.document.text) <= WHOLE_DOCUMENT_CHARS
            and result.passage.end - result.passage.start < len(result.document.text)))
        if not whole:
            return []
        passages_of = getattr(self.searcher, "passages_of", None)  # a backend's stored passages: no search
        if passages_of is not None:
            documents = {result.document.doc_id: result.document for result in merged}
            hits = [SearchResult(0, passage, documents[d], 0.0, None, None) for d in whole for passage in passages_of(d)]
        else:  # a bare retriever: the same search restricted to those documents
            hits = self.searcher.search(question, k=NAME_SEARCH_K, mode="hybrid",
                                        filters={**(filters or {}), "doc_id": {"in": whole}})
        have = within([(r.document.doc_id, r.passage.start, r.passage.end) for r in merged])
        missing = [hit for hit in hits if not have(hit.document.doc_id, hit.passage.start, hit.passage.end)]
        return [hit.replace(rank=len(merged) + i) for i, hit in enumerate(missing, start=1)]

    def run(self, state: AnswerState) -> None:
        assert state.info is not None, "analyse runs first"
        question, filters = state.info.text, state.filters
        results = self.searcher.search(question, k=state.k, mode="hybrid", filters=filters)
        # what the question itself retrieves; no gap when a name the question gives stands in a retrieved passage
        named = any(mentions(result.passage.text, name) for result in results for name in state.info.names)
        gap = "" if named else retrieval_gap(results, self.min_dense_score)
        if state.info.keep and "doc_id" not in (filters or {}):
            results = keep_candidates(results, state.info.keep, lambda ids: self.searcher.search(
                question, k=1, mode="hybrid", filters={**(filters or {}), "doc_id": {"in": ids}}))
        if state.info.kind == "comparison" and len(state.info.names) >= 2:
            results = self._with_named(results, state.info.names, filters)
        if not gap:
            results = self._with_mentioned(results, state.info.names, filters)
        state.passages = merge_same_document(results)
        if not gap and (unretrieved := self._unretrieved(state.passages, state.info.names, question, filters)):
            state.retrieved = [(r.document.doc_id, r.passage.start, r.passage.end) for r in state.passages]
            state.passages = merge_same_document([*state.passages, *unretrieved])
        state.emit("passages", state.passages)
        if not named and (gap := gap or retrieval_gap(state.passages, self.min_dense_score)):
            state.abstain(gap)
