"""Evidence-first answering, stage by stage: retrieve -> evidence -> prompt -> generate -> verify -> compose.

1. Retrieve the top-``k`` passages (hybrid) and merge passages of one document where they overlap.
2. Select the best :data:`EVIDENCE_SENTENCES` sentences (:mod:`~citerag.service.answering.evidence`).
3. The model judges each sentence alone: its probability that the sentence answers the question (one token
   under a yes/no grammar; :func:`~citerag.service.answering.generate.relevance`). A sentence's final score is
   :data:`RELEVANCE_WEIGHT` times that probability plus the rest times its evidence score; the best one is stated.
4. A yes/no question is also decided: the model drafts what the top document's text concludes, then its
   yes/no/maybe probabilities are read (:func:`~citerag.service.answering.generate.decide`).
5. Verify: abstain when retrieval found nothing close, or when the model's probability that the best sentence
   answers is below :data:`~citerag.service.answering.verify.MIN_CONFIDENCE`.
6. Compose the answer from the chosen sentences (:mod:`~citerag.service.answering.compose`): each citation is the
   exact span of what the answer states. An answer of one sentence (no decision, no paper named) states only the
   part of it that answers (:func:`~citerag.service.answering.span.answer_span`; ``answer_span="sentence"``: the
   whole sentence).

A question that names two or more retrieved papers ("How do SV2P and Error Encoding Networks each ...?",
:func:`~citerag.service.answering.evidence.named_documents`) gets the best sentence of each, in the order named (each
paper's best sentence joins the evidence if it was not among it). Otherwise a sentence from another paper that the
model judges as likely to answer as the best one, within :data:`SECOND_PAPER_RATIO`, and at least
:data:`SECOND_PAPER_MIN`, is stated too; a which-papers question lists every paper whose sentence clears
:data:`WHICH_PAPERS_MIN`.

Measured on COVID-QA's dev half (40 questions, ``eval/results/qa.md``): the pointwise judgement picks a sentence
holding the gold span for 0.65 of questions (0.625 mixed with the evidence score, F1 0.385 vs 0.357 for the
evidence score alone); one listwise choice among the numbered sentences picked it for only 0.475 (the model
favoured one position).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from citerag.index.backend import Searcher
from citerag.index.search import SearchResult
from citerag.service.answering import verify
from citerag.service.answering.base import RetrievingAnswerer, retrieval_gap
from citerag.service.answering.compose import compose
from citerag.service.answering.evidence import DEFAULT_WEIGHTS, Evidence, grouped, named_documents, select_evidence
from citerag.service.answering.generate import decide, relevance
from citerag.service.answering.prompt import asks_which_papers, is_yes_no
from citerag.service.answering.types import NOT_FOUND, Answer
from citerag.service.generator import Generator

#: Evidence sentences the model judges (each costs ~1 s of prompt evaluation on 2 cores; at most 9).
EVIDENCE_SENTENCES = 6
#: Weight of the model's relevance probability in a sentence's final score (the rest: its evidence score);
#: chosen on COVID-QA's dev half.
RELEVANCE_WEIGHT = 0.5
#: A sentence of another paper is stated too when the model's probability for it is at least this share of the
#: best sentence's, and at least :data:`SECOND_PAPER_MIN`.
SECOND_PAPER_RATIO = 0.9
SECOND_PAPER_MIN = 0.6
#: A which-papers answer lists each paper whose best sentence has at least this probability.
WHICH_PAPERS_MIN = 0.5


class EvidenceAnswerer(RetrievingAnswerer):
    """Answers by choosing evidence (module docstring); the same interface as the generative answerer.

    Args:
        retriever: what ranks passages: a :class:`~citerag.index.retrieve.Retriever` or a backend.
        generator: the loaded chat model.
        encode: the dense encoder's ``encode`` (``list[str] -> (n, dim) float32``, L2-normalised rows).
        min_dense_score: abstain before asking the model when the best passage's cosine is below this.
        min_confidence: abstain when the model's P(yes) for the stated sentence is below this
            (:mod:`~citerag.service.answering.verify`).
        min_confidence_unseen: the P(yes) a question answered by a stated sentence (not a yes/no one) needs when
            one of its content words is in no indexed passage (the retriever's ``unseen_terms``; a retriever without
            it never abstains for this; :mod:`~citerag.service.answering.verify`); 0 turns the rule off.
        evidence_sentences: sentences the model judges (1-9).
        weights: ``(dense, bm25, coverage, rank)`` weights of the evidence score (:mod:`~citerag.service.answering.evidence`).
        decision_bias: per-class log-probability offsets of the yes/no/maybe decision.
        answer_span: ``"part"``: a lone stated sentence is cut to the part that answers; ``"sentence"``: whole.

    Raises:
        ValueError: ``evidence_sentences`` outside 1..9, or ``answer_span`` neither ``"part"`` nor ``"sentence"``.
    """

    def __init__(
        self,
        retriever: Searcher,
        generator: Generator,
        encode: Callable[[list[str]], np.ndarray],
        min_dense_score: float = 0.18,
        min_confidence: float = verify.MIN_CONFIDENCE,
        evidence_sentences: int = EVIDENCE_SENTENCES,
        min_confidence_unseen: float = verify.MIN_CONFIDENCE_UNSEEN,
        decision_bias: dict[str, float] | None = None,
        weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS,
        answer_span: str = "part",
    ) -> None:
        if not 1 <= evidence_sentences <= 9:
            raise ValueError(f"evidence_sentences must be in 1..9, got {evidence_sentences}")
        if answer_span not in ("part", "sentence"):
            raise ValueError(f"answer_span must be 'part' or 'sentence', got {answer_span!r}")
        self.retriever = retriever
        self.generator = generator
        self.encode = encode
        self.min_dense_score = min_dense_score
        self.min_confidence = min_confidence
        self.min_confidence_unseen = min_confidence_unseen
        if min_confidence_unseen > 0:
            # the function-word list comes from scikit-learn, whose import takes ~1.3 s: paid here (the model loads
            # in the background) rather than by the first question, which would also stall searches meanwhile
            verify.content_terms("")
        self.evidence_sentences = evidence_sentences
        self.decision_bias = dict(decision_bias if decision_bias is not None else verify.DECISION_BIAS)
        self.weights = weights
        self.answer_span = answer_span

    def answer(
        self,
        question: str,
        passages: list[SearchResult],
        retrieve_ms: float = 0.0,
        on_delta: Callable[[str], bool | None] | None = None,
    ) -> Answer:
        """Answer ``question`` from already retrieved ``passages`` (numbered ``[1]..[len(passages)]``).

        Args:
            retrieve_ms: time already spent retrieving (ms; counted in ``timings_ms["total"]``).
            on_delta: receives the composed answer text once (the stream's visible text).
        """
        started = time.perf_counter() - retrieve_ms / 1000
        timings = {"retrieve": retrieve_ms, "evidence": 0.0, "prompt": 0.0, "generate": 0.0}
        if gap := retrieval_gap(passages, self.min_dense_score):
            return self._abstain(question, passages, [], gap, timings, started)
        tic = time.perf_counter()
        named = named_documents(question, passages)
        evidence = grouped(self._select(question, passages, named))
        timings["evidence"] = (time.perf_counter() - tic) * 1000
        if not evidence:
            return self._abstain(question, passages, [], "the passages hold no sentence to answer from", timings, started)
        yes_no = is_yes_no(question)
        judged = relevance(self.generator, question, evidence)
        steps = [c.completion for c in judged]
        p = [c.probabilities["yes"] for c in judged]
        decision = None
        if yes_no:
            decided, draft = decide(self.generator, question, passages[0].passage.text)
            steps += [draft, decided.completion]
            decision = verify.calibrated_decision(decided.probabilities, self.decision_bias)
        timings["prompt"] = sum(c.prompt_ms for c in steps)
        timings["generate"] = sum(c.generate_ms for c in steps)
        raw = " ".join(c.text for c in steps)
        final = [RELEVANCE_WEIGHT * pi + (1 - RELEVANCE_WEIGHT) * e.score for pi, e in zip(p, evidence)]
        best = int(np.argmax(final))
        confidence = p[best]
        if confidence < self.min_confidence and decision is None:
            return self._abstain(
                question, passages, evidence, f"the model found no evidence sentence that answers "
                f"(confidence {confidence:.2f} < {self.min_confidence:.2f})", timings, started, raw, confidence,
            )
        if decision is None and confidence < self.min_confidence_unseen and (unseen := self.unseen_words(question)):
            return self._abstain(
                question, passages, evidence, f"no indexed passage mentions {', '.join(map(repr, unseen))}, and the "
                f"best evidence sentence does not make up for it (confidence {confidence:.2f} < "
                f"{self.min_confidence_unseen:.2f})", timings, started, raw, confidence,
            )
        used = self._used(question, evidence, p, best) if not named else self._each_named(evidence, final, named)
        several_papers = len({evidence[i].doc_id for i in used}) > 1
        text, citations = compose(
            evidence, used, decision, name_papers=several_papers or asks_which_papers(question),
            question=question if self.answer_span == "part" else None,
        )
        if on_delta is not None:
            on_delta(text)
        timings["total"] = (time.perf_counter() - started) * 1000
        return Answer(
            question, text, False, "", citations, passages, raw, timings, len(steps), evidence, used, decision,
            confidence,
        )

    def unseen_words(self, question: str) -> list[str]:
        """The content words of ``question`` (:func:`~citerag.service.answering.verify.content_terms`) that no
        indexed passage holds, as written in the question; ``[]`` when the retriever cannot tell, or when its corpus
        is too small for an ordinary word's absence to mean anything (fewer than
        :data:`~citerag.service.answering.verify.MIN_VOCABULARY_FOR_UNSEEN` distinct terms)."""
        unseen_terms = getattr(self.retriever, "unseen_terms", None)
        if unseen_terms is None or getattr(self.retriever, "vocabulary_size", 0) < verify.MIN_VOCABULARY_FOR_UNSEEN:
            return []
        terms = verify.content_terms(question)
        unseen = set(unseen_terms([token for _, token in terms]))
        return [word for word, token in terms if token in unseen]

    def _select(self, question: str, passages: list[SearchResult], named: list[str]) -> list[Evidence]:
        """The best :attr:`evidence_sentences` sentences, plus the best sentence of each document the question
        names (:func:`~citerag.service.answering.evidence.named_documents`) that has none among them (at most 9 in all)."""
        ranked = select_evidence(question, passages, self.encode, max(self.evidence_sentences, 64), self.weights)
        chosen = ranked[: self.evidence_sentences]
        for doc_id in named:
            if len(chosen) < 9 and all(e.doc_id != doc_id for e in chosen):
                chosen += [e for e in ranked if e.doc_id == doc_id][:1]
        return chosen

    @staticmethod
    def _each_named(evidence: list[Evidence], final: list[float], named: list[str]) -> list[int]:
        """For a question that names several papers: the best-scoring sentence of each, in the order named."""
        best_of: dict[str, int] = {}
        for i, item in enumerate(evidence):
            if item.doc_id in named and (item.doc_id not in best_of or final[i] > final[best_of[item.doc_id]]):
                best_of[item.doc_id] = i
        return [best_of[doc_id] for doc_id in named if doc_id in best_of]

    @staticmethod
    def _used(question: str, evidence: list[Evidence], p: list[float], best: int) -> list[int]:
        """The evidence indexes to state: ``best``, plus the most probable sentence of each other paper that
        clears :data:`SECOND_PAPER_RATIO` of its probability and :data:`SECOND_PAPER_MIN` (for which-papers
        questions, :data:`WHICH_PAPERS_MIN`)."""
        used = [best]
        floor = WHICH_PAPERS_MIN if asks_which_papers(question) else max(SECOND_PAPER_MIN, SECOND_PAPER_RATIO * p[best])
        papers = {evidence[best].doc_id}
        for i in sorted(range(len(p)), key=lambda j: -p[j]):
            if evidence[i].doc_id not in papers and p[i] >= floor:
                used.append(i)
                papers.add(evidence[i].doc_id)
        return used

    @staticmethod
    def _abstain(
        question: str, passages: list[SearchResult], evidence: list[Evidence], reason: str,
        timings: dict[str, float], started: float, raw: str = "", confidence: float = 0.0,
    ) -> Answer:
        timings["total"] = (time.perf_counter() - started) * 1000
        return Answer(
            question, NOT_FOUND, True, reason, [], passages, raw, timings, evidence=evidence, confidence=confidence
        )
