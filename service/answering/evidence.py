"""Evidence selection: the retrieved passages cut into sentences with exact document spans, each scored for the
question, the best few kept as numbered evidence.

A sentence's score is a weighted sum of four signals, each scaled to ``[0, 1]`` within the question's candidates:

* ``dense``: cosine similarity of the sentence and the question (the index's embedding model, L2-normalised);
* ``bm25``: BM25 (Robertson & Zaragoza 2009; rank-bm25's Okapi variant, k1 = 1.5, b = 0.75) of the sentence
  among the candidate sentences, with the index's analyser (:func:`citerag.index.tokenize.tokenize`);
* ``coverage``: the IDF-weighted share of the question's terms the sentence contains (IDF over the candidates; a
  term is contained in a longer word it begins, "data" in "dataset": :func:`holds`);
* ``rank``: the reciprocal of its passage's fused rank, ``1 / rank`` (a sentence of the best passage scores 1).

The weights (:data:`DEFAULT_WEIGHTS`) were chosen on the shared COVID-QA questions' dev half only
(``eval/results/qa.md``), and checked on PubMedQA and the shipped corpus.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import zip_longest

import numpy as np
from rank_bm25 import BM25Okapi

from citerag.index.search import SearchResult
from citerag.index.text import fold, split_sentences
from citerag.index.tokenize import tokenize
from citerag.service.answering.language import (
    FINDING_SECTION_WORDS,
    INTRODUCING_VERBS,
    OWN_WORK,
    SECTION_LABEL,
    number_values,
)
from citerag.service.answering.state import AnswerState

#: (dense, bm25, coverage, rank) weights of the sentence score.
DEFAULT_WEIGHTS: tuple[float, float, float, float] = (0.4, 0.1, 0.4, 0.1)
#: Sentences shorter than this many words (:func:`word_count`) are not evidence on their own (headings, "Methods:",
#: citations, links).
MIN_WORDS = 4
#: A sentence longer than this many characters is cut at clause boundaries into pieces of about this size, so a
#: run-on sentence of a full paper cannot fill the prompt.
MAX_CHARS = 300

Encode = Callable[[list[str]], np.ndarray]
_DIGIT = re.compile(r"\d")
_URL = re.compile(r"\(?(?:https?://|www\.)\S+")
_WORD = re.compile(r"[^\W_][\w'’-]*")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One evidence sentence.

    Attributes:
        n: 1-based number of the passage (in the list given to :func:`select_evidence`) holding it: the ``[n]`` an
            answer resting on it cites.
        result: that passage and its document.
        start, end: character offsets into the document text: ``result.document.text[start:end] == text``.
        text: the sentence as stored (markup kept); the prompt and the answer show
            :func:`~citerag.index.text.readable` of it.
        score: the combined score (module docstring), in ``[0, 1]``.
        dense: its cosine similarity to the question (unscaled), in ``[-1, 1]``.
    """

    n: int
    result: SearchResult
    start: int
    end: int
    text: str
    score: float
    dense: float

    @property
    def doc_id(self) -> str:
        return self.result.document.doc_id


Spans = Callable[[str, int, int], bool]


def candidate_sentences(passages: Sequence[SearchResult], where: Spans | None = None) -> list[tuple[int, int, int]]:
    """The sentences of ``passages`` as ``(passage number (1-based), doc start, doc end)``, each document span
    once (overlapping passages share sentences), sentences under :data:`MIN_WORDS` words left out and sentences
    over :data:`MAX_CHARS` characters cut at ``;`` or ``,`` boundaries (:func:`_pieces`); ``where``: only the
    sentences ``(doc_id, start, end)`` it accepts."""
    seen: set[tuple[str, int, int]] = set()
    out: list[tuple[int, int, int]] = []
    for n, result in enumerate(passages, start=1):
        offset = result.passage.start
        for start, end in sentence_spans(result.passage.text):
            key = (result.document.doc_id, offset + start, offset + end)
            if key in seen or (where is not None and not where(*key)):
                continue
            seen.add(key)
            out.append((n, key[1], key[2]))
    return out


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as evidence reads them, ``(start, end)`` offsets: sentences under :data:`MIN_WORDS`
    words left out, those over :data:`MAX_CHARS` characters cut at ``;`` or ``,`` boundaries (:func:`_pieces`)."""
    return [(a, b) for start, end in split_sentences(text) for a, b in _pieces(text, start, end)
            if word_count(text[a:b]) >= MIN_WORDS]


def word_count(text: str) -> int:
    """The words of ``text`` (runs of letters or digits), web addresses and lone symbols left out: a Markdown link
    ("[Project page & code](https://...)") or a bare address is not a sentence.

    >>> word_count("[Project page & code](https://example.org/v1/)"), word_count("We use 5 GPUs.")
    (3, 4)
    """
    return len(_WORD.findall(_URL.sub(" ", text)))


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


#: A question term this long or longer is held by a sentence word it begins ("data" by "dataset"; BM25's stems do
#: not join a word and its compounds or derivations).
MIN_PREFIX_CHARS = 4


def holds(term: str, tokens: set[str], min_chars: int = MIN_PREFIX_CHARS) -> bool:
    """Whether the sentence ``tokens`` (BM25 stems) hold the question ``term``: the stem itself, or, when it has
    ``min_chars`` letters or more, a stem it begins.

    >>> holds("data", {"dataset", "strings"}), holds("use", {"user"}), holds("add", {"addit"}, min_chars=3)
    (True, False, True)
    """
    return term in tokens or (len(term) >= min_chars and any(token.startswith(term) for token in tokens))


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

    A sentence is scored without its web addresses (``_URL``): "Our code is available at
    https://github.com/x/PolyNeXt." does not match a question about PolyNeXt.

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
    folded = [fold(_URL.sub(" ", s)) for s in sentences]  # a web address is a link, not what the sentence says
    vectors = encode([fold(question), *folded])
    cosines = (vectors[1:] @ vectors[0]).astype(np.float64)
    tokens = [tokenize(s) for s in folded]
    asked = list(dict.fromkeys(tokenize(question)))
    bm25 = np.asarray(BM25Okapi([t or [""] for t in tokens], k1=1.5, b=0.75).get_scores(asked), dtype=np.float64) \
        if asked else np.zeros(len(sentences))
    n = len(sentences)
    sets = [set(t) for t in tokens]
    held = [[term for term in asked if holds(term, s)] for s in sets]  # each sentence's question terms
    idf = {term: math.log(1 + n / (1 + sum(term in terms for terms in held))) for term in asked}
    total = sum(idf.values())
    coverage = np.asarray([sum(idf[t] for t in terms) / total if total else 0.0 for terms in held])
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
    where: Spans | None = None,
) -> list[Evidence]:
    """The ``keep`` best evidence sentences of ``passages`` for ``question``, best first.

    Args:
        passages: retrieved passages, best first; ``Evidence.passage`` numbers them ``1..len(passages)``.
        encode: the dense encoder (``list[str] -> (n, dim) float32``, L2-normalised rows).
        keep: how many sentences to keep (>= 1).
        where: only the sentences ``(doc_id, start, end)`` it accepts are candidates (and scored among
            themselves).

    Raises:
        ValueError: ``keep < 1``.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    candidates = candidate_sentences(passages, where)
    if not candidates:
        return []
    texts = [passages[n - 1].document.text[s:e] for n, s, e in candidates]
    ranks = [passages[n - 1].rank for n, _, _ in candidates]
    scores, cosines = sentence_scores(question, texts, ranks, encode, weights)
    order = np.argsort(-scores, kind="stable")[:keep]
    return [
        Evidence(
            n=candidates[i][0], result=passages[candidates[i][0] - 1], start=candidates[i][1],
            end=candidates[i][2], text=texts[i], score=float(scores[i]), dense=float(cosines[i]),
        )
        for i in map(int, order)
    ]


def grouped(evidence: Sequence[Evidence]) -> list[Evidence]:
    """``evidence`` grouped by document (documents in order of their best sentence), each document's sentences in
    text order: how the prompt shows them, so a paper's sentences read together."""
    by_doc: dict[str, list[Evidence]] = {}
    for item in evidence:
        by_doc.setdefault(item.doc_id, []).append(item)
    return [item for items in by_doc.values() for item in sorted(items, key=lambda e: e.start)]


#: A comparison that names a paper is of at least this many papers: when it names fewer (it describes the others:
#: "How do V1 and the clinical-agent verifier differ?"), the best other papers' sentences join the evidence. One that
#: names none compares things, often within one paper (COVID-QA: "What is the difference between evolution and
#: synthetic constructs?"), and keeps its evidence.
COMPARED_PAPERS = 2
#: Evidence sentences the writer reads for a question about one thing (each costs ~0.4 s of prompt evaluation on
#: 2 cores; chosen on dev questions: eval/results/qa.md).
EVIDENCE_SENTENCES = 3
#: At most this many characters of evidence in all (about 4 characters a token): the prompt's length is the
#: answer's latency.
MAX_EVIDENCE_CHARS = 700
#: A question that names two or more papers gets this many sentences of each (the best about its own work first,
#: then the next best), at most :data:`MAX_NAMED_SENTENCES` in all: "How do SV2P and Error Encoding Networks each
#: represent uncertainty?" needs the second paper's second sentence ("... encoding the unpredictable components
#: into a low-dimensional latent variable").
NAMED_PAPER_SENTENCES = 2
MAX_NAMED_SENTENCES = 4
#: A paper is shown in an answer about several papers by its best sentence about its own work (we propose, our
#: method; or naming the paper) when that scores at least this share of the paper's best sentence: what it does,
#: not the background it starts from.
OWN_SCORE_RATIO = 0.7
#: A question about several papers (which papers, comparisons) gets the best sentence of each paper whose best
#: sentence scores at least this share of the best sentence's score, up to :data:`MAX_PAPERS` papers.
PAPER_SCORE_RATIO = 0.5
MAX_PAPERS = 4
#: With each paper judged (:class:`~citerag.service.answering.judge.JudgePapers`), the candidates of a which-papers
#: question: each paper whose best sentence scores at least this share of the best one, up to
#: :data:`MAX_CANDIDATE_PAPERS`, each shown by its best sentence and its best about its own work.
CANDIDATE_PAPER_RATIO = 0.4
MAX_CANDIDATE_PAPERS = 6
#: A candidate paper of a judged which-papers question is shown by its best sentence about its own work when that
#: scores at least this share of its best sentence (lower than :data:`OWN_SCORE_RATIO`: the judge reads both, and a
#: named paper is shown by what it does). On the which-papers dev questions, 0.4 against 0.7: sentences that do not
#: name their paper (background: "However, existing approaches ...") 21 -> 13, cited-paper precision 0.71 -> 0.68;
#: held out 4 -> 3, 0.68 both (eval/results/qa.md).
JUDGED_OWN_SCORE_RATIO = 0.4


#: A yes/no question weighs a sentence of a structured abstract's background, objective or methods at this share of
#: its score (:func:`findings_first`): such sentences restate what the study asked ("OBJECTIVE: This study aimed to
#: evaluate the utility of risk stratification ...") and the model, reading them, guesses; the answer is in what it
#: found. Set before measuring, not tuned: PubMedQA dev100 0.52 -> 0.58, held-out test100 0.56 -> 0.60
#: (eval/results/qa.md).
STATED_SECTION_WEIGHT = 0.5


def section(text: str, offset: int) -> str | None:
    """The structured-abstract section label (:data:`~citerag.service.answering.language.SECTION_LABEL`) in force
    at ``offset`` of ``text``: the last one at or before it; ``None`` when there is none (an unstructured
    abstract).

    >>> text = "BACKGROUND: Tidal volume varies. RESULTS: Two hands gave more volume."
    >>> section(text, 0), section(text, text.index("Two")), section("We propose LU-KV.", 3)
    ('BACKGROUND', 'RESULTS', None)
    """
    last = None
    for match in SECTION_LABEL.finditer(text, 0, offset + 48):  # a label starting at ``offset`` ends within it
        if match.start() <= offset:
            last = match.group(1)
    return last


def findings_first(ranked: Sequence[Evidence], weight: float = STATED_SECTION_WEIGHT) -> list[Evidence]:
    """``ranked`` re-ordered for a yes/no question: a sentence under a structured abstract's section label that
    reports no findings (:data:`~citerag.service.answering.language.FINDING_SECTION_WORDS`: not RESULTS or
    CONCLUSIONS) counts ``weight`` of its score; unlabelled sentences and findings count in full. The scores
    themselves are kept."""
    def key(item: Evidence) -> float:
        label = section(item.result.document.text, item.start)
        stated = label is not None and not FINDING_SECTION_WORDS & set(re.split(r"[\s&/-]+", label))
        return -item.score * (weight if stated else 1.0)

    return sorted(ranked, key=key)


def own_work_first(items: Sequence[Evidence], ratio: float = OWN_SCORE_RATIO) -> Evidence:
    """A paper's sentence for an answer about several papers: of ``items`` (one paper's sentences, best first), the
    best about the paper's own work (:data:`~citerag.service.answering.language.OWN_WORK`, or naming the paper)
    when it scores at least ``ratio`` of the best, else the best.

    Raises:
        IndexError: ``items`` is empty.
    """
    from citerag.service.answering.names import coined_name

    best = items[0]
    name = coined_name(best.result.document.text)
    own = next((item for item in items if OWN_WORK.search(item.text) or (name and name in item.text)), None)
    return own if own is not None and own.score >= ratio * best.score else best


def within(spans: Sequence[tuple[str, int, int]]) -> Spans:
    """Whether a span ``(doc_id, start, end)`` (a sentence, a passage) lies within one of ``spans``."""
    by_doc: dict[str, list[tuple[int, int]]] = {}
    for doc_id, start, end in spans:
        by_doc.setdefault(doc_id, []).append((start, end))
    return lambda doc_id, start, end: any(s <= start and end <= e for s, e in by_doc.get(doc_id, ()))


def _then(ranked: Sequence[Evidence], more: Callable[[], Sequence[Evidence]]) -> Iterator[Evidence]:
    """``ranked``, then ``more()``, called only when ``ranked`` is used up."""
    yield from ranked
    yield from more()


def _unique(items: Sequence[Evidence]) -> list[Evidence]:
    """``items`` without repeats (the same document span), in order."""
    seen: set[tuple[str, int, int]] = set()
    out = []
    for item in items:
        if (key := (item.doc_id, item.start, item.end)) not in seen:
            seen.add(key)
            out.append(item)
    return out


class SelectEvidence:
    """The select-evidence step: score the sentences of ``state.passages`` (:func:`select_evidence`), keep the few
    the writer reads, grouped by paper (:func:`grouped`), and emit them (``"evidence"``).

    What is kept: the best ``sentences``, within ``max_chars``; for a question that names two or more papers (or a
    comparison that names one), the best sentence of each named paper too
    (:func:`~citerag.service.answering.names.named_documents`), and when it names two or more, sentences of those
    papers only, :data:`NAMED_PAPER_SENTENCES` each in turn (a third paper's sentence about the same topic answers
    nothing asked); for a quantity question, the best sentence
    that states a number when none of those does, and for a definition of an abbreviation the best sentence that
    defines it (:func:`_stating`), for a fact asked by its class a sentence of the answer's own paper that states
    one (:meth:`_with_class`); for a which-papers question, only the best sentence of each
    paper that scores at least ``paper_ratio`` of the best one, up to ``max_papers`` (one when it asks for one
    paper: "Which paper ...?"), and of each paper it names. A question about one thing (not yes/no) also gets a
    reserve: the next-best sentences, as many and within the same limit (:meth:`following`), which the judge reads
    before it abstains.

    Args:
        encode: the dense encoder (``list[str] -> (n, dim) float32``, L2-normalised rows).
        sentences: evidence sentences for a question about one thing (>= 1).
        max_chars: the evidence's length limit in characters (the best sentence is always kept).
        paper_ratio, max_papers: the several-papers rule above.
        weights: ``(dense, bm25, coverage, rank)`` weights of the sentence score.
        judged_papers: a which-papers question in the plural (``QuestionInfo.polar``) keeps candidates for the
            judge of each paper instead (:meth:`chosen`).

    Raises:
        ValueError: ``sentences`` or ``max_papers`` below 1, ``paper_ratio`` outside ``[0, 1]``.
    """

    name = "evidence"

    def __init__(
        self, encode: Encode, sentences: int = EVIDENCE_SENTENCES, max_chars: int = MAX_EVIDENCE_CHARS,
        paper_ratio: float = PAPER_SCORE_RATIO, max_papers: int = MAX_PAPERS,
        weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS, judged_papers: bool = False,
    ) -> None:
        if sentences < 1 or max_papers < 1:
            raise ValueError(f"sentences and max_papers must be >= 1, got {sentences} and {max_papers}")
        if not 0.0 <= paper_ratio <= 1.0:
            raise ValueError(f"paper_ratio must be in [0, 1], got {paper_ratio}")
        self.encode = encode
        self.sentences = sentences
        self.max_chars = max_chars
        self.paper_ratio = paper_ratio
        self.max_papers = max_papers
        self.weights = weights
        self.judged_papers = judged_papers

    def run(self, state: AnswerState) -> None:
        from citerag.service.answering.names import named_documents

        assert state.info is not None
        retrieved = within(state.retrieved) if state.retrieved else None
        ranked = select_evidence(state.info.text, state.passages, self.encode, 64, self.weights, retrieved)
        if not ranked:
            state.abstain("the passages hold no sentence to answer from")
            return
        if state.info.kind == "yes_no":
            ranked = findings_first(ranked)
        # the sentences of a document read whole that the question did not retrieve: only a rule's need takes one,
        # so they are scored (and encoded) only when a rule looks past ``ranked``
        unretrieved = functools.cache(lambda: select_evidence(
            state.info.text, state.passages, self.encode, 64, self.weights, lambda *span: not retrieved(*span)
        ) if retrieved else [])
        state.named = named_documents(state.info.names, state.passages)
        chosen = self.chosen(ranked, state.named, state.info.kind, 1 if state.info.one_paper else self.max_papers,
                             state.info.names, judged=self.judged_papers and state.info.polar is not None,
                             subject=state.info.subject, asked_class=state.info.asked_for, question=state.info.text,
                             unretrieved=unretrieved)
        state.evidence = grouped(chosen)
        if not (state.info.several_papers or state.info.kind == "yes_no"):
            state.reserve = grouped(self.following(ranked, chosen))
        state.emit("evidence", state.evidence)

    def following(self, ranked: list[Evidence], chosen: list[Evidence]) -> list[Evidence]:
        """The best sentences of ``ranked`` (best first) that are not in ``chosen``: at most :attr:`sentences`,
        within :attr:`max_chars` (the first is always kept); ``[]`` when none is left."""
        return self._filled([], (item for item in ranked if item not in chosen))

    def _filled(self, kept: list[Evidence], candidates: Iterable[Evidence], limit: int | None = None) -> list[Evidence]:
        """``kept`` extended by ``candidates`` (best first) until it holds ``limit`` (default :attr:`sentences`)
        or the next would pass :attr:`max_chars` (the first of an empty ``kept`` is always taken); a candidate
        already kept is skipped."""
        kept = list(kept)
        chars = sum(len(item.text) for item in kept)
        for item in candidates:
            if len(kept) >= (limit or self.sentences) or (kept and chars + len(item.text) > self.max_chars):
                break
            if item not in kept:
                kept.append(item)
                chars += len(item.text)
        return kept

    def chosen(self, ranked: list[Evidence], named: list[str], kind: str = "fact",
               max_papers: int | None = None, names: Sequence[str] = (), judged: bool = False,
               subject: str | None = None, asked_class: str | None = None, question: str = "",
               unretrieved: Callable[[], Sequence[Evidence]] = tuple) -> list[Evidence]:
        """The evidence to keep from ``ranked`` (best first), for a question of ``kind`` that names the documents
        ``named`` and the things ``names`` (class docstring); a which-papers question keeps at most ``max_papers``
        (default :attr:`max_papers`; 1 when it asks for one paper), or, when its papers will be ``judged``, the
        candidates for that judge (:data:`CANDIDATE_PAPER_RATIO`, :data:`MAX_CANDIDATE_PAPERS`), each by its best
        sentence and its best about its own work (:data:`JUDGED_OWN_SCORE_RATIO`); ``subject``: what a "What is X?"
        question asks to define, ``asked_class`` the class of what a "What/Which <noun> ...?" question asks for
        and ``question`` its text (:func:`_stating`); ``unretrieved``: gives the sentences of the documents read
        whole that the question did not retrieve (best first), which only a sentence that states what is asked for
        is taken from, after ``ranked`` (called only then)."""
        by_doc: dict[str, list[Evidence]] = {}
        for item in ranked:
            by_doc.setdefault(item.doc_id, []).append(item)
        firsts = {doc_id: own_work_first(items) for doc_id, items in by_doc.items()}  # each paper's sentence
        if kind == "which_papers":  # the papers whose best sentence qualifies, and the papers it names
            ratio, limit = (CANDIDATE_PAPER_RATIO, MAX_CANDIDATE_PAPERS) if judged else \
                (self.paper_ratio, max_papers or self.max_papers)
            papers = [d for d, items in by_doc.items() if items[0].score >= ratio * ranked[0].score][:limit]
            papers += [d for d in named if d in by_doc]
            if judged:  # each candidate by its best sentence and its best about its own work
                own = {d: own_work_first(by_doc[d], JUDGED_OWN_SCORE_RATIO) for d in papers}
                return _unique([item for d in papers for item in (by_doc[d][0], own[d])])
            return _unique([firsts[d] for d in papers])
        several = len(named) >= 2 or kind == "comparison"
        if several and len(papers := [d for d in named if d in by_doc]) >= 2:
            # about the papers it names, not others like them: each paper's sentences in turn, its own work first
            turns = [[firsts[d], *(item for item in by_doc[d] if item is not firsts[d])] for d in papers]
            in_turn = [item for row in zip_longest(*turns) for item in row if item is not None]
            return self._filled([], in_turn, max(self.sentences, min(NAMED_PAPER_SENTENCES * len(papers),
                                                                     MAX_NAMED_SENTENCES)))
        compared = [d for d in (named if several else []) if d in firsts]
        if kind == "comparison" and compared:  # a comparison of papers it names: the best other paper joins
            others = [d for d in by_doc if d != ranked[0].doc_id and d not in compared]
            compared += others[:max(0, COMPARED_PAPERS - len({ranked[0].doc_id, *compared}))]
        chosen = self._filled(_unique([ranked[0], *(firsts[d] for d in compared)]), ranked[1:])
        if kind == "fact" and asked_class:
            return self._with_class(chosen, ranked, unretrieved, {ranked[0].doc_id, *named}, asked_class, names)
        stating_rule = _stating(kind, names, subject, question)
        if stating_rule is not None and not any(stating_rule(item.text) for item in chosen):
            # the best sentence that states what the kind asks for takes the last place
            stating = next((item for item in _then(ranked, unretrieved) if stating_rule(item.text)), None)
            if stating is not None:
                chosen = [*chosen[: max(1, self.sentences - 1)], stating]
        return chosen

    def _with_class(self, chosen: list[Evidence], ranked: list[Evidence], unretrieved: Callable[[], Sequence[Evidence]],
                    own: set[str], asked_class: str, names: Sequence[str]) -> list[Evidence]:
        """``chosen`` for a fact asked by its class ("What base model architecture ...?", "What caricature dataset
        was AdsSe-GAN evaluated on?"): the expected answer type of factoid QA (Moldovan et al. 2000, ACL). The
        answer's ``own`` papers (the best sentence's, and those the question names) must state it in a sentence of
        theirs: a name of that class the question does not hold, anywhere in a sentence with the class noun
        (:func:`~citerag.service.answering.names.names_of_class`; "three databases (PubMed, Embase and Cochrane
        Library)"); another paper's dataset answers nothing about this one. When none does, the best sentence of
        theirs that does takes the last place, one with the name right before the noun first ("the OLMoE-1B-7B
        architecture"), then anywhere ("a public caricature dataset, WebCaricature"); when none does and no
        sentence of theirs holds the class noun at all, their best sentence that holds it ("the prior specified by
        a gamma process" for "What prior process ...?"). The candidates are ``ranked``, then ``unretrieved()``."""
        from citerag.service.answering.names import names_of_class

        noun = tokenize(asked_class)
        mine = [item for item in chosen if item.doc_id in own]
        if not noun or any(names_of_class(asked_class, item.text, names, adjacent=False) for item in mine):
            return chosen

        def holds_noun(text: str) -> bool:
            tokens = set(tokenize(fold(text)))
            return all(holds(term, tokens) for term in noun)

        tests: list[Stated] = [lambda text: names_of_class(asked_class, text, names),
                               lambda text: names_of_class(asked_class, text, names, adjacent=False)]
        if not any(holds_noun(item.text) for item in mine):
            tests.append(holds_noun)
        for test in tests:
            stating = next((item for item in _then(ranked, unretrieved) if item.doc_id in own and item not in chosen
                            and test(item.text)), None)
            if stating is not None:
                return [*chosen[: max(1, self.sentences - 1)], stating]
        return chosen


_INTRODUCING = rf"(?:{INTRODUCING_VERBS})(?:es|s|d)?"  # "we introduce", "is introduced"


def introduces(subject: str, text: str, with_class: bool = False) -> bool:
    """Whether ``text`` says what ``subject`` is: "we introduce Polaris, a ...", "we propose HELIX, which ..." or
    "Polaris is a ..." (any case, Markdown emphasis and an aside in parentheses after the name allowed);
    ``with_class``: only by the class it belongs to ("Polaris, a ...", "Polaris is a ..."), not "HELIX, which ...".

    >>> introduces("Polaris", "We introduce **Polaris**, a polar hyperspherical embedding framework.")
    True
    >>> introduces("Polaris", "Polaris then combines robust local constraints.")
    False
    >>> text = "To address this, we propose HELIX, which assigns each feature a learnable identity."
    >>> introduces("HELIX", text), introduces("HELIX", text, with_class=True)
    (True, False)
    >>> introduces("Divergence Decoding", "Divergence Decoding (DD) is a decoding mechanism.", with_class=True)
    True
    """
    name = rf"\**{re.escape(subject)}\**(?:\s*\([^)]{{1,40}}\))?"
    follows = "a|an|the" if with_class else "a|an|the|which|that"
    pattern = (rf"\b{_INTRODUCING}\s+{name}\s*,\s+(?:{follows})\b"
               rf"|\b{name}\s+(?:is|are)\s+(?:a|an)\b")
    return re.search(pattern, fold(text), re.IGNORECASE) is not None


Stated = Callable[[str], bool]


def _stating(kind: str, names: Sequence[str], subject: str | None = None, question: str = "") -> Stated | None:
    """What a sentence must do to state what a question of ``kind`` naming ``names`` asks for, when evidence needs
    one such sentence. A quantity is stated with a number, not one the ``question`` states ("How much faster than
    Gibbs et al. (2025) ...?"); an abbreviation asked about ("What does GGF stand for?", "What is ASMC?") is defined
    by its long form (:func:`~citerag.service.answering.names.long_form`), and the ``subject`` of "What is X?" (or
    of "What is X, and what ...?", a fact asked more of it) by the sentence that says what it is
    (:func:`introduces`). A fact asked by its class has its own rule (:meth:`SelectEvidence._with_class`).
    ``None``: no such need."""
    from citerag.service.answering.names import long_form

    if kind == "number":  # a number the question states itself ("than Gibbs et al. (2025)") answers nothing
        asked = re.compile("|".join(rf"(?<![\d.]){re.escape(n)}(?![\d])" for n in number_values(question)) or "$^")
        return lambda text: bool(_DIGIT.search(asked.sub(" ", text)))
    if kind == "definition" and (names or subject):
        return lambda text: any(long_form(name, text) for name in names) or bool(subject and introduces(subject, text))
    if subject:  # "What is X, and what ...?": what X is, whatever the rest asks
        return lambda text: introduces(subject, text)
    return None
