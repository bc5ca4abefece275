"""Evidence selection: the retrieved passages cut into sentences with exact document spans, each scored for the
question, the best few kept as numbered evidence.

A sentence's score is a weighted sum of four signals, each scaled to ``[0, 1]`` within the question's candidates:

* ``dense``: cosine similarity of the sentence and the question (the index's embedding model, L2-normalised);
* ``bm25``: BM25 (Robertson & Zaragoza 2009; rank-bm25's Okapi variant, k1 = 1.5, b = 0.75) of the sentence
  among the candidate sentences, with the index's analyser (:func:`citerag.index.tokenize.tokenize`);
* ``coverage``: the IDF-weighted share of the question's terms the sentence contains (IDF over the candidates);
* ``rank``: the reciprocal of its passage's fused rank, ``1 / rank`` (a sentence of the best passage scores 1).

The weights (:data:`DEFAULT_WEIGHTS`) were chosen on the shared COVID-QA questions' dev half only
(``eval/results/qa.md``), and checked on PubMedQA and the shipped corpus.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi

from citerag.index.search import SearchResult
from citerag.index.text import fold, split_sentences
from citerag.index.tokenize import tokenize
from citerag.service.context import coined_name, names_in

#: (dense, bm25, coverage, rank) weights of the sentence score.
DEFAULT_WEIGHTS: tuple[float, float, float, float] = (0.4, 0.1, 0.4, 0.1)
#: Sentences shorter than this many words are not evidence on their own (headings, "Methods:", citations).
MIN_WORDS = 4
#: A sentence longer than this many characters is cut at clause boundaries into pieces of about this size, so a
#: run-on sentence of a full paper cannot fill the prompt.
MAX_CHARS = 300

Encode = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One evidence sentence.

    Attributes:
        passage: 1-based number of the passage (in the list given to :func:`select_evidence`) holding it.
        result: that passage and its document.
        start, end: character offsets into the document text: ``result.document.text[start:end] == text``.
        text: the sentence as stored (markup kept); the prompt and the answer show :func:`~citerag.index.text.fold` of it.
        score: the combined score (module docstring), in ``[0, 1]``.
        dense: its cosine similarity to the question (unscaled), in ``[-1, 1]``.
    """

    passage: int
    result: SearchResult
    start: int
    end: int
    text: str
    score: float
    dense: float

    @property
    def doc_id(self) -> str:
        return self.result.document.doc_id


def candidate_sentences(passages: Sequence[SearchResult]) -> list[tuple[int, int, int]]:
    """The sentences of ``passages`` as ``(passage number (1-based), doc start, doc end)``, each document span
    once (overlapping passages share sentences), sentences under :data:`MIN_WORDS` words left out and sentences
    over :data:`MAX_CHARS` characters cut at ``;`` or ``,`` boundaries (:func:`_pieces`)."""
    seen: set[tuple[str, int, int]] = set()
    out: list[tuple[int, int, int]] = []
    for n, result in enumerate(passages, start=1):
        text, offset = result.passage.text, result.passage.start
        for start, end in split_sentences(text):
            for piece_start, piece_end in _pieces(text, start, end):
                key = (result.document.doc_id, offset + piece_start, offset + piece_end)
                if key in seen or len(text[piece_start:piece_end].split()) < MIN_WORDS:
                    continue
                seen.add(key)
                out.append((n, key[1], key[2]))
    return out


def _pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``text[start:end]`` as one span, or, when longer than :data:`MAX_CHARS`, cut after ``;`` or ``, `` into
    pieces of at most about :data:`MAX_CHARS` characters (a piece is never cut inside a word)."""
    if end - start <= MAX_CHARS:
        return [(start, end)]
    pieces: list[tuple[int, int]] = []
    piece_start = start
    while end - piece_start > MAX_CHARS:
        window = text[piece_start : piece_start + MAX_CHARS]
        cut = max(window.rfind("; "), window.rfind(", "))
        if cut < MAX_CHARS // 4:
            cut = window.rfind(" ")
        if cut <= 0:
            break
        pieces.append((piece_start, piece_start + cut + 1))
        piece_start += cut + 2
    pieces.append((piece_start, end))
    return pieces


def _scaled(values: np.ndarray) -> np.ndarray:
    """``values`` min-max scaled to ``[0, 1]``; all zeros when they are all equal."""
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


def sentence_scores(
    question: str,
    sentences: list[str],
    ranks: list[int],
    encode: Encode,
    weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS,
) -> tuple[np.ndarray, np.ndarray]:
    """Score ``sentences`` for ``question`` (module docstring).

    Args:
        sentences: the candidate sentences (stored text; folded here).
        ranks: each sentence's passage rank (1-based).
        encode: the dense encoder: ``list[str] -> (n, dim) float32``, rows L2-normalised.
        weights: ``(dense, bm25, coverage, rank)``.

    Returns:
        ``(scores, cosines)``: ``(n,) float64`` combined scores in ``[0, 1]`` (when the weights sum to 1) and the
        ``(n,) float64`` raw cosine similarities.
    """
    if not sentences:
        return np.zeros(0), np.zeros(0)
    folded = [fold(s) for s in sentences]
    vectors = encode([fold(question), *folded])
    cosines = (vectors[1:] @ vectors[0]).astype(np.float64)
    tokens = [tokenize(s) for s in folded]
    asked = list(dict.fromkeys(tokenize(question)))
    bm25 = np.asarray(BM25Okapi([t or [""] for t in tokens], k1=1.5, b=0.75).get_scores(asked), dtype=np.float64) \
        if asked else np.zeros(len(sentences))
    n = len(sentences)
    sets = [set(t) for t in tokens]
    idf = {term: math.log(1 + n / (1 + sum(term in s for s in sets))) for term in asked}
    total = sum(idf.values())
    coverage = np.asarray([sum(idf[t] for t in asked if t in s) / total if total else 0.0 for s in sets])
    prior = 1.0 / np.asarray(ranks, dtype=np.float64)
    w_dense, w_bm25, w_cov, w_rank = weights
    scores = (
        w_dense * _scaled(cosines) + w_bm25 * _scaled(bm25) + w_cov * coverage + w_rank * prior
    )
    return scores, cosines


def select_evidence(
    question: str,
    passages: Sequence[SearchResult],
    encode: Encode,
    keep: int = 6,
    weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS,
) -> list[Evidence]:
    """The ``keep`` best evidence sentences of ``passages`` for ``question``, best first.

    Args:
        passages: retrieved passages, best first; ``Evidence.passage`` numbers them ``1..len(passages)``.
        encode: the dense encoder (``list[str] -> (n, dim) float32``, L2-normalised rows).
        keep: how many sentences to keep (>= 1).

    Raises:
        ValueError: ``keep < 1``.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    candidates = candidate_sentences(passages)
    if not candidates:
        return []
    texts = [passages[n - 1].document.text[s:e] for n, s, e in candidates]
    ranks = [passages[n - 1].rank for n, _, _ in candidates]
    scores, cosines = sentence_scores(question, texts, ranks, encode, weights)
    order = np.argsort(-scores, kind="stable")[:keep]
    return [
        Evidence(
            passage=candidates[i][0], result=passages[candidates[i][0] - 1], start=candidates[i][1],
            end=candidates[i][2], text=texts[i], score=float(scores[i]), dense=float(cosines[i]),
        )
        for i in map(int, order)
    ]


def question_names(question: str) -> list[str]:
    """The names ``question`` mentions, in order: name-shaped tokens (``SV2P``, ``Harmonic-NAS``; the field's
    common acronyms left out, :func:`~citerag.service.context.names_in`) and runs of two or more capitalised words after
    its first word ("Error Encoding Networks", "Critique Fine-Tuning").

    >>> question_names("How do SV2P and Error Encoding Networks each model uncertainty?")
    ['SV2P', 'Error Encoding Networks']
    >>> question_names("What is the main cause of HIV-1 infection in children?")
    ['HIV-1']
    """
    folded = fold(question)
    found = [(folded.find(name), name) for name in dict.fromkeys(names_in(folded))]
    words = list(re.finditer(r"[^\s,;:?!()]+", folded))
    run: list[re.Match[str]] = []
    for match in [*words[1:], None]:
        if match is not None and match.group(0)[0].isupper() and not match.group(0).isupper():
            run.append(match)
            continue
        if len(run) >= 2:
            found.append((run[0].start(), " ".join(m.group(0) for m in run)))
        run = []
    names: list[str] = []
    for _, name in sorted(found):
        if not any(name in other or other in name for other in names):
            names.append(name)
    return names


def named_documents(question: str, passages: Sequence[SearchResult]) -> list[str]:
    """The retrieved documents ``question`` names, in the order it names them: a name (:func:`question_names`)
    names the best-ranked document that is called so, by its title (the name in it as whole words, case ignored) or
    by the name its abstract introduces (:func:`~citerag.service.context.coined_name`). A name a paper only mentions
    ("HIV-1", "COVID-19") names none. Returns ``[]`` unless at least two different documents are named: a question
    about one paper needs nothing more than the best sentence."""
    docs: list[str] = []
    for name in question_names(question):
        pattern = re.compile(rf"(?<!\w){re.escape(name.lower())}(?!\w)")
        for result in passages:
            document = result.document
            coined = coined_name(document.text)
            if pattern.search(fold(document.title).lower()) or (coined and coined.lower() == name.lower()):
                if document.doc_id not in docs:
                    docs.append(document.doc_id)
                break
    return docs if len(docs) >= 2 else []


def grouped(evidence: Sequence[Evidence]) -> list[Evidence]:
    """``evidence`` grouped by document (documents in order of their best sentence), each document's sentences in
    text order: how the prompt shows them, so a paper's sentences read together."""
    by_doc: dict[str, list[Evidence]] = {}
    for item in evidence:
        by_doc.setdefault(item.doc_id, []).append(item)
    return [item for items in by_doc.values() for item in sorted(items, key=lambda e: e.start)]
