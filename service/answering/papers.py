"""The read step: the documents a recipe chooses, as the model reads them (:class:`~citerag.service.answering.types.
Paper`): their sentences numbered in the document's order.

A document as short as an abstract (:attr:`~citerag.service.answering.config.AnswerConfig.whole_paper_chars`) is
read whole, whatever passages retrieval found of it (parent-document retrieval: search small passages, read their
document), so the sentence that answers is read even where the question's wording retrieved another passage; its
passages that were not retrieved join the answer's passages, so that a citation can point at them. A longer
document (a full paper) is read as its retrieved passages, best first, within the question's reading budget
(:attr:`~citerag.service.answering.config.AnswerConfig.read_tokens`), shown in the document's order.

Sentences come from :func:`~citerag.index.text.split_sentences`; one under :data:`MIN_WORDS` words (a heading, a
link) is not read on its own, and one over :data:`MAX_CHARS` characters is cut at clause boundaries, so a run-on
sentence cannot fill the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from citerag.index.search import SearchResult
from rank_bm25 import BM25Okapi

from citerag.index.text import split_sentences
from citerag.index.tokenize import tokenize
from citerag.index.types import Document
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.types import Evidence, Paper

#: Sentences shorter than this many words are not read on their own (headings, "Methods:", links).
MIN_WORDS = 4
#: A sentence longer than this many characters is cut at clause boundaries into pieces of about this size.
MAX_CHARS = 500
_URL = re.compile(r"\(?(?:https?://|www\.)\S+")
_WORD = re.compile(r"[^\W_][\w'’-]*")


def word_count(text: str) -> int:
    """The words of ``text`` (runs of letters or digits), web addresses and lone symbols left out.

    >>> word_count("[Project page & code](https://example.org/v1/)"), word_count("We use 5 GPUs.")
    (3, 4)
    """
    return len(_WORD.findall(_URL.sub(" ", text)))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as the model reads them, ``(start, end)`` offsets (module docstring).

    >>> text = "Soil holds much water. See: x. A long run-on sentence follows here."
    >>> [text[s:e] for s, e in sentence_spans(text)]
    ['Soil holds much water.', 'A long run-on sentence follows here.']
    """
    return [(a, b) for start, end in split_sentences(text) for a, b in _pieces(text, start, end)
            if word_count(text[a:b]) >= MIN_WORDS]


def _pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``text[start:end]`` as one span, or, when longer than :data:`MAX_CHARS` characters, cut after ``;`` or ``, ``
    into pieces of at most about :data:`MAX_CHARS` characters (never inside a word)."""
    if end - start <= MAX_CHARS:
        return [(start, end)]
    pieces: list[tuple[int, int]] = []
    piece_start = start
    while end - piece_start > MAX_CHARS:
        window = text[piece_start: piece_start + MAX_CHARS]
        cut = max(window.rfind("; "), window.rfind(", "))
        if cut < MAX_CHARS // 4:
            cut = window.rfind(" ")
        if cut <= 0:
            break
        pieces.append((piece_start, piece_start + cut + 1))
        piece_start += cut + 2
    pieces.append((piece_start, end))
    return pieces


def related(question: str, sentences: Sequence[Evidence], n: int) -> list[int]:
    """The indexes of the ``n`` sentences of ``sentences`` most related to ``question``, in their order: BM25
    (Robertson & Zaragoza 2009; rank-bm25's Okapi, k1 = 1.5, b = 0.75) of the question's terms over the sentences,
    with the index's analyser (:func:`~citerag.index.tokenize.tokenize`).

    >>> from citerag.service.answering.types import Evidence
    >>> read = [Evidence(1, None, 0, 1, t) for t in ("Seeds keep.", "Kilns burn wood.", "Cold seeds keep longer.")]
    >>> related("How long do cold seeds keep?", read, 2)
    [0, 2]
    """
    if not sentences:
        return []
    tokens = [tokenize(s.text) or [""] for s in sentences]
    scores = BM25Okapi(tokens, k1=1.5, b=0.75).get_scores(list(dict.fromkeys(tokenize(question))))
    best = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))[:n]
    return sorted(best)


def _held_by(start: int, end: int, numbered: Sequence[tuple[int, SearchResult]]) -> tuple[int, SearchResult] | None:
    """The ``(n, passage)`` of ``numbered`` overlapping ``start``-``end`` most, or ``None`` when none does."""
    best = max(numbered, key=lambda item: min(end, item[1].passage.end) - max(start, item[1].passage.start),
               default=None)
    if best is None or min(end, best[1].passage.end) - max(start, best[1].passage.start) <= 0:
        return None
    return best


def _sentences(document: Document, spans: Sequence[tuple[int, int]],
               numbered: Sequence[tuple[int, SearchResult]]) -> tuple[Evidence, ...]:
    """``spans`` of ``document`` as evidence, each held by the passage of ``numbered`` overlapping it most (spans no
    passage holds are left out)."""
    out = []
    for start, end in spans:
        held = _held_by(start, end, numbered)
        if held is not None:
            out.append(Evidence(held[0], held[1], start, end, document.text[start:end]))
    return tuple(out)


class Reader:
    """Reads documents for the model (module docstring) from the answer's passages, adding the unretrieved passages
    of documents read whole.

    Args:
        searcher: what retrieved the passages: its ``passages_of(doc_id)`` lists a document's stored passages (a
            searcher without it reads only the retrieved ones).
        config: the answering configuration (reading budget, abstract size).
    """

    def __init__(self, searcher: object, config: AnswerConfig) -> None:
        self.searcher = searcher
        self.config = config

    def read(self, passages: list[SearchResult], doc_ids: Sequence[str],
             budget_chars: int | None = None) -> tuple[list[SearchResult], list[Paper]]:
        """The papers ``doc_ids`` (in that order, each retrieved in ``passages``) as the model reads them, within
        ``budget_chars`` characters in all (default the configured budget; the first paper is always read), and
        ``passages`` with the passages of papers read whole appended (numbered on).

        Returns:
            ``(passages, papers)``; a paper whose sentences do not fit the budget is not read.
        """
        budget = self.config.read_chars if budget_chars is None else budget_chars
        papers: list[Paper] = []
        for doc_id in doc_ids:
            own = [(n, r) for n, r in enumerate(passages, start=1) if r.document.doc_id == doc_id]
            if not own:
                continue
            document, rank = own[0][1].document, min(r.rank for _, r in own)
            spent = sum(paper.chars for paper in papers)
            if len(document.text) <= self.config.whole_paper_chars:
                passages, own = self._whole(passages, own)
                sentences = _sentences(document, sentence_spans(document.text), own)
                paper = Paper(document, sentences, whole=True, rank=rank)
            else:
                paper = Paper(document, self._windows(document, own, budget - spent), whole=False, rank=rank)
            if papers and spent + paper.chars > budget or not paper.sentences:
                continue
            papers.append(paper)
        return passages, papers

    def _whole(self, passages: list[SearchResult],
               own: list[tuple[int, SearchResult]]) -> tuple[list[SearchResult], list[tuple[int, SearchResult]]]:
        """``passages`` with the stored passages of ``own``'s document that none of ``own`` covers appended, and
        ``own`` with them."""
        document = own[0][1].document
        passages_of = getattr(self.searcher, "passages_of", None)
        if passages_of is None:
            return passages, own
        added = list(passages)
        for passage in passages_of(document.doc_id):
            if any(r.passage.start <= passage.start and passage.end <= r.passage.end for _, r in own):
                continue
            result = SearchResult(len(added) + 1, passage, document, 0.0, None, None)
            added.append(result)
            own = [*own, (len(added), result)]
        return added, own

    def stored_papers(self) -> Iterator[Paper]:
        """Every abstract-sized document of the searcher's corpus read whole, from its stored passages (a backend's
        ``documents`` and ``passages_of``; none for a searcher without them): the papers read ahead."""
        documents = getattr(self.searcher, "documents", None)
        passages_of = getattr(self.searcher, "passages_of", None)
        if documents is None or passages_of is None:
            return
        offset = 0
        while batch := documents(offset, 100):
            offset += len(batch)
            for document in batch:
                if len(document.text) > self.config.whole_paper_chars:
                    continue
                numbered = [(n, SearchResult(n, passage, document, 0.0, None, None))
                            for n, passage in enumerate(passages_of(document.doc_id), start=1)]
                sentences = _sentences(document, sentence_spans(document.text), numbered)
                if sentences:
                    yield Paper(document, sentences, whole=True, rank=1)

    @staticmethod
    def _windows(document: Document, own: list[tuple[int, SearchResult]], budget: int) -> tuple[Evidence, ...]:
        """A long document's retrieved passages, best first, as many as ``budget`` characters hold (at least one),
        their sentences in the document's order."""
        chosen: list[tuple[int, SearchResult]] = []
        used = 0
        for n, result in sorted(own, key=lambda item: item[1].rank):
            size = result.passage.end - result.passage.start
            if chosen and used + size > budget:
                break
            chosen.append((n, result))
            used += size
        spans = sorted({span for _, r in chosen for span in _offset(sentence_spans(r.passage.text), r.passage.start)})
        return _sentences(document, spans, chosen)


def _offset(spans: Sequence[tuple[int, int]], by: int) -> list[tuple[int, int]]:
    return [(start + by, end + by) for start, end in spans]
