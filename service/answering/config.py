"""One configuration for answering: every component's setting and every rule's switch, with its default in one
place (:class:`AnswerConfig`), built from the service's settings by :meth:`AnswerConfig.of`.

A *rule* is a check or gate of the service beyond the model's own reading (a gate that abstains, a check that
drops a written sentence). Each has a named switch in :class:`Rules`, so that ``citerag eval --ablate`` can turn it
off and measure what it earns (:mod:`citerag.eval.ablation`); a rule that earns nothing on the test halves is
deleted, not kept switched off.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from citerag.service.settings import Settings


@dataclass(frozen=True, slots=True)
class Rules:
    """The switches of the service's rules (all on by default; :mod:`citerag.service.answering.rules` describes
    each and records when one acts).

    Attributes:
        named_papers: a comparison that names a paper retrieval missed gets that paper's best passage (searched by
            its name); one whose names find both its papers is answered without the judge's abstention (the names,
            not the judge, say which papers are asked about; verify still checks what is written).
        unseen_words: a question with a content word no indexed passage holds needs the judge's confidence of
            :attr:`AnswerConfig.min_confidence_unseen` (over a corpus with a large vocabulary).
        second_paper: when the judge finds that the first paper does not answer, read the next retrieved paper.
        numbers: a written sentence's numbers must be stated by the sentences it rests on.
        support: most of a written sentence's content words must be in the sentences it rests on
            (:attr:`AnswerConfig.min_support`).
        extract: when no written sentence is supported, answer with the paper's sentence most like what the model
            wrote (off: abstain).
        name_subject: a written sentence that opens with "We"/"Our" names its subject ("The authors ...").
        yes_bar: a yes/no question's "yes" needs P(yes) of :attr:`AnswerConfig.min_confidence`; below it the
            decision is the likelier of "no" and "maybe" (small models lean to "yes": Zhao et al. 2021, "Calibrate
            Before Use", ICML).
        paper_label: an answer about a paper the question asks for (which paper, comparisons) opens each paper's
            sentence with its label, where the sentence does not name the paper.
        each_paper: a comparison whose written answer rests on one paper gets the other paper's sentence closest
            to the question.
    """

    named_papers: bool = True
    unseen_words: bool = True
    second_paper: bool = True
    numbers: bool = True
    support: bool = True
    extract: bool = True
    name_subject: bool = True
    yes_bar: bool = True
    paper_label: bool = True
    each_paper: bool = True

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every rule's name, in declaration order."""
        return tuple(f.name for f in fields(cls))

    def without(self, name: str) -> Rules:
        """These rules with ``name`` switched off.

        Raises:
            ValueError: no rule of that name (the message lists them).
        """
        if name not in self.names():
            raise ValueError(f"unknown rule {name!r}; one of {', '.join(self.names())}")
        return replace(self, **{name: False})


@dataclass(frozen=True, slots=True)
class AnswerConfig:
    """Every setting of answering (defaults here only; :meth:`of` reads the service's settings).

    Attributes:
        k: passages retrieved per question.
        min_confidence: below this P(yes) that the paper answers, the service abstains; a yes/no question's "yes"
            needs it too.
        min_confidence_unseen: the P(yes) a question with an unseen content word needs (:attr:`Rules.unseen_words`).
        min_vocabulary_for_unseen: the unseen-word rule needs a corpus of at least this many distinct terms
            (about the 8,000-9,000 word families a reader needs for ordinary text: Nation 2006, Canadian Modern
            Language Review 63(1)).
        min_support: the share of a written sentence's new content words its sources must hold (:attr:`Rules.support`).
        read_tokens: the per-question reading budget (model tokens, estimated at 4 characters a token): a paper
            longer than this is read as its retrieved passages instead of whole; a second paper is read only
            within it.
        whole_paper_chars: a document at most this long (an abstract) is read whole; longer ones (full papers) as
            their retrieved passages.
        fact_papers: how a fact, number or definition question reads: 1, the best paper alone (the next one when it
            does not answer: :attr:`Rules.second_paper`); 2, the best two together.
        focus_sentences: a yes/no question's conclusion is asked with this many of the paper's sentences most related
            to the question quoted after it (0: none).
        judge_yes_no: a yes/no question is first judged on whether the paper addresses it (off: the best paper is
            read unjudged, and only the retrieval gap and, with a word no indexed passage holds, the judgement
            under :attr:`min_confidence_unseen` abstain).
        candidate_papers: the most papers a which-papers question judges.
        candidate_ratio: a which-papers candidate's best passage must score this share of the best one's.
        answer_tokens: the written answer's limit (model tokens).
        max_sentences: the most sentences an answer keeps.
        state_cache_bytes: the bound of the paper-state cache on disk (least recently used states go first).
        read_ahead_documents: papers are read into the state cache when the index is opened, for corpora of at
            most this many documents; beyond, on first use.
        rules: the rules' switches.
    """

    k: int = 8
    min_confidence: float = 0.65
    min_confidence_unseen: float = 0.85
    min_vocabulary_for_unseen: int = 10_000
    min_support: float = 0.6
    read_tokens: int = 700
    whole_paper_chars: int = 4000
    fact_papers: int = 1
    focus_sentences: int = 3
    judge_yes_no: bool = False
    candidate_papers: int = 4
    candidate_ratio: float = 0.5
    answer_tokens: int = 120
    max_sentences: int = 3
    state_cache_bytes: int = 4 * 1024**3
    read_ahead_documents: int = 64
    rules: Rules = field(default_factory=Rules)

    def __post_init__(self) -> None:
        for name in ("min_confidence", "min_confidence_unseen", "min_support", "candidate_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.fact_papers not in (1, 2):
            raise ValueError(f"fact_papers must be 1 or 2, got {self.fact_papers}")
        for name in ("k", "read_tokens", "candidate_papers", "answer_tokens", "max_sentences"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def read_chars(self) -> int:
        """The reading budget in characters (:attr:`read_tokens` at 4 characters a token)."""
        return 4 * self.read_tokens

    @classmethod
    def of(cls, settings: Settings, rules: Rules | None = None) -> AnswerConfig:
        """The configuration ``settings`` give (``CITERAG_*``), with ``rules`` (default: all on)."""
        return cls(
            k=settings.ask_k, min_confidence=settings.min_confidence,
            min_confidence_unseen=settings.min_confidence_unseen, read_tokens=settings.read_tokens,
            answer_tokens=settings.max_answer_tokens, state_cache_bytes=settings.state_cache_mb * 1024**2,
            read_ahead_documents=settings.whole_paper_documents, rules=rules or Rules(),
        )
