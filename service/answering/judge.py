"""The judge steps: is the chosen evidence an answer to the question at all, and, for a which-papers question, which
candidate papers does it name? Abstention is the service's decision, never the writer's: the writing prompt offers
no way out, and these steps decide before it.

* Each paper of a which-papers question (:class:`JudgePapers`): the question asked of one paper ("Does the paper
  use flow matching?") over that paper's sentences; a paper is named when its retrieval share times the model's
  P(yes) reaches :data:`MIN_PAPER_SCORE`. Over the 26 dev which-papers questions (eval/results/qa.md) this named
  the right papers with precision 0.72 and recall 0.81 (every needed paper for 15), against 0.58 / 0.78 (12) for
  the score ratio alone; the single judgement below then does not run. Over a small corpus, whose papers are read
  whole, a paper that passes is judged again over its whole abstract and named on both judgements
  (:data:`MIN_PAPER_SCORE_WHOLE`).

* Unseen words: a question with a content word that no indexed passage holds (the searcher's ``unseen_terms``:
  "glacier" over ML abstracts) is often about something the corpus does not cover; it is answered only when the
  confidence reaches :data:`MIN_CONFIDENCE_UNSEEN`, and only over a corpus of :data:`MIN_VOCABULARY_FOR_UNSEEN`
  terms or more, where ordinary words are not missing (over the 38 shipped abstracts, 1,608 terms, "database" and
  "need" are unseen too).
* What is counted: a counting question ("How many GPUs ...?") is answered only when the evidence mentions what it
  counts (:func:`~citerag.service.answering.question.counted_terms`): 12,000 rollouts do not answer it.
* The model's judgement: one token, "Do the evidence sentences answer the question?", read as ``P(yes)``
  (:func:`~citerag.service.answering.choice.choose`). Its prompt is the writer's prompt plus one line, so the
  writer afterwards evaluates only a few tokens more. Below :data:`MIN_CONFIDENCE` the service abstains (below
  :data:`~citerag.service.answering.whole_paper.MIN_CONFIDENCE_WHOLE` when the evidence is a paper read whole).
  A yes/no question is judged only when it has :data:`MIN_UNSEEN_WORDS_YES_NO` unseen words or more (its answer
  is otherwise the decision): "Can diffusion models generate foldable origami crease patterns?" over ML abstracts
  is about what they do not cover.
* Close evidence: an evidence sentence whose dense cosine similarity to the question reaches :data:`CLOSE_COSINE`
  answers it whatever the model's confidence, so the model is not asked (``confidence`` 1.0) unless the
  unseen-word rule needs its confidence. The model refuses paraphrased questions whose evidence it has
  ("What does one paper scan to check ...?"); the similarity of the question to its closest sentence is a second,
  independent reading of the same thing (calibrated above every dev no-answer and off-corpus question's:
  eval/results/qa.md).
* A stated count: a counting question about a paper it names ("How many baselines does HELIX outperform?") whose
  evidence has a sentence of that paper stating a number of what it counts ("... surpassing all 16 baselines")
  is answered as close evidence is: the model refused that one at P(yes) 0.62, and the count is what was asked.
* A second look: before it abstains, the judge reads the next-best sentences (``state.reserve``) in place of the
  evidence; when they answer, they become the evidence (emitted again) and the writer writes from them. Over 140
  answerable dev questions (shipped dev half, ML dev set, seed questions, COVID-QA dev) the answer's sentence is
  ranked 4th or 5th for 9 (eval/results/qa.md); the second look costs one more judgement (~2 s on 2 cores), only
  where the first said no.
"""

from __future__ import annotations

from citerag.index.backend import Searcher
from citerag.index.text import readable
from citerag.index.tokenize import tokenize
from citerag.service.answering.choice import choose
from citerag.service.answering.compose import statement_text
from citerag.service.answering.evidence import JUDGED_OWN_SCORE_RATIO, Evidence, grouped, own_work_first
from citerag.service.answering.prompts import (
    DECISION_SLOT,
    YES_NO_GRAMMAR,
    judge_messages,
    paper_messages,
    paper_whole_messages,
)
from citerag.service.answering.state import AnswerState
from citerag.service.answering.verify import Describe, paper_statements, states_count
from citerag.service.answering.whole_paper import ANSWER, MIN_CONFIDENCE_WHOLE, ReadPaper
from citerag.service.generator import Generator

#: Below this probability that the evidence answers, the service abstains (chosen on three dev sets at once, each
#: better at 0.65 than at 0.7 and no off-corpus or no-answer question let through: eval/results/qa.md).
MIN_CONFIDENCE = 0.65
#: An evidence sentence at least this close to the question (cosine similarity, the dense encoder's) answers it
#: whatever the model's confidence (:class:`Judge`). Over the dev sets' 18 no-answer and off-corpus questions the
#: closest evidence sentence scores at most 0.555 (seed s007; ML dev 0.41-0.54); 0.60 leaves a margin and recovers
#: the dev questions the judge refused with a sentence at 0.60 or closer (eval/results/qa.md).
CLOSE_COSINE = 0.60
#: The confidence a question with an unseen content term needs (eval/results/qa.md).
MIN_CONFIDENCE_UNSEEN = 0.85
#: A yes/no question is judged when it has at least this many unseen words. One unseen word is common in questions
#: the corpus answers: 39 of the 45 PubMedQA shared yes/no questions with an unseen word have one ("somatisation",
#: "HMO"), and each is answered by its abstract; the ML dev set's off-corpus yes/no question has two ("foldable",
#: "origami").
MIN_UNSEEN_WORDS_YES_NO = 2
#: The unseen-word rule needs a corpus with at least this many distinct (stemmed) terms: about the 8,000-9,000 word
#: families a reader needs for ordinary English text (Nation 2006, Canadian Modern Language Review 63(1)).
MIN_VOCABULARY_FOR_UNSEEN = 10_000
#: A candidate paper of a which-papers question is named when its best sentence's share of the best score times the
#: model's P(yes) for it reaches this (:class:`JudgePapers`; chosen on the which-papers dev questions:
#: eval/results/qa.md).
MIN_PAPER_SCORE = 0.24
#: Over a small corpus, whose papers are read whole (:class:`~citerag.service.answering.whole_paper.ReadPaper`), a
#: candidate paper is named when that score times the model's P(yes) over the paper read whole reaches this: two
#: readings of the paper, its best sentences and its whole abstract. Chosen by paper-level F1 on the 26 dev
#: which-papers questions (precision / recall 0.693 / 0.650 at the shipped 0.24 -> 0.785 / 0.638); on the 15 held
#: out 0.786 / 0.767 -> 0.889 / 0.744 (eval/results/qa.md, eighteenth round; ``eval/probes/which_papers_whole.py``).
MIN_PAPER_SCORE_WHOLE = 0.19


class Judge:
    """Estimate ``state.confidence`` (the model's probability that the evidence answers) and abstain below the
    thresholds (module docstring).

    Args:
        generator: the loaded chat model.
        searcher: what retrieved the passages; its ``unseen_terms`` / ``vocabulary_size`` (when it has them) drive
            the unseen-word rule.
        min_confidence: abstain below this confidence.
        min_confidence_unseen: the confidence a question with an unseen content word needs (0: rule off).
        second_look: read ``state.reserve`` before abstaining (module docstring).
        close_cosine: an evidence sentence at least this close to the question (cosine similarity of the dense
            encoder, ``Evidence.dense``) answers it whatever the model's confidence (module docstring; 1: off).
        min_confidence_whole: the bar when the evidence is a paper read whole (``state.read_whole``:
            :data:`~citerag.service.answering.whole_paper.MIN_CONFIDENCE_WHOLE`).

    Raises:
        ValueError: a threshold outside ``[0, 1]``.
    """

    name = "judge"

    def __init__(
        self, generator: Generator, searcher: Searcher | None = None, min_confidence: float = MIN_CONFIDENCE,
        min_confidence_unseen: float = MIN_CONFIDENCE_UNSEEN, second_look: bool = True,
        close_cosine: float = CLOSE_COSINE, min_confidence_whole: float = MIN_CONFIDENCE_WHOLE,
    ) -> None:
        for name, value in (("min_confidence", min_confidence), ("min_confidence_unseen", min_confidence_unseen),
                            ("close_cosine", close_cosine), ("min_confidence_whole", min_confidence_whole)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self.generator = generator
        self.searcher = searcher
        self.min_confidence = min_confidence
        self.min_confidence_unseen = min_confidence_unseen
        self.second_look = second_look
        self.close_cosine = close_cosine
        self.min_confidence_whole = min_confidence_whole

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        if state.papers_judged:
            return
        unseen = self.unseen_words(state)
        if not state.evidence or (state.info.kind == "yes_no" and len(unseen) < MIN_UNSEEN_WORDS_YES_NO):
            return
        if missing := self.uncounted(state):
            state.abstain(f"the evidence does not mention {', '.join(map(repr, missing))}, which the question counts")
            return
        close = max(item.dense for item in state.evidence) >= self.close_cosine or self.counts_named(state)
        if close and not unseen:  # the evidence score alone decides: no judgement (the writer reads this prompt)
            state.confidence = 1.0
            return
        messages, confidence = self.judged(state)
        bar = self.min_confidence_whole if state.read_whole else self.min_confidence
        if confidence < bar and not close and self.second_look and state.reserve:
            first, first_messages, first_whole = state.evidence, messages, state.read_whole
            state.evidence, state.reserve, state.read_whole = state.reserve, [], False
            messages, second = self.judged(state)
            if second >= self.min_confidence and not self.uncounted(state):
                confidence, bar = second, self.min_confidence
                state.emit("evidence", state.evidence)
            else:  # the abstention rests on the first evidence, as shown
                state.evidence, messages, state.read_whole = first, first_messages, first_whole
        state.confidence = confidence
        if confidence < bar and not close:
            state.abstain(f"the evidence does not answer the question (confidence {confidence:.2f} < {bar:.2f})")
        elif confidence < self.min_confidence_unseen and unseen:
            state.abstain(f"no indexed passage mentions {', '.join(map(repr, unseen))}, and the evidence does not "
                          f"make up for it (confidence {confidence:.2f} < {self.min_confidence_unseen:.2f})")
        if state.abstained or state.info.kind == "yes_no":
            self.generator.pin(messages)  # the writer will not extend this prompt

    def judged(self, state: AnswerState) -> tuple[list[dict[str, str]], float]:
        """One judgement of ``state.evidence``: its prompt and the model's probability that the evidence answers;
        the model time is added to ``state``."""
        assert state.info is not None
        messages = judge_messages(state.info, state.evidence)
        choice = choose(self.generator, messages, YES_NO_GRAMMAR, ["yes", "no"], pin=False)
        state.add_model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return messages, choice.probabilities["yes"]

    @staticmethod
    def uncounted(state: AnswerState) -> list[str]:
        """The terms of what a counting question counts that no evidence sentence holds (``[]``: all there, or
        not a counting question)."""
        assert state.info is not None
        held = {t for e in state.evidence for t in tokenize(e.text)}
        return [t for t in state.info.counted if t not in held]

    @staticmethod
    def counts_named(state: AnswerState) -> bool:
        """Whether a counting question about a paper it names has an evidence sentence of that paper stating a
        number of what it counts (:func:`~citerag.service.answering.verify.states_count`)."""
        assert state.info is not None
        return bool(state.info.counted) and any(
            item.doc_id in state.named and states_count(readable(item.text), state.info.counted)
            for item in state.evidence
        )

    def unseen_words(self, state: AnswerState) -> list[str]:
        """The question's content words that no indexed passage holds, as written; ``[]`` when the searcher cannot
        tell or its corpus has fewer than :data:`MIN_VOCABULARY_FOR_UNSEEN` distinct terms."""
        unseen_terms = getattr(self.searcher, "unseen_terms", None)
        if unseen_terms is None or getattr(self.searcher, "vocabulary_size", 0) < MIN_VOCABULARY_FOR_UNSEEN:
            return []
        assert state.info is not None
        unseen = set(unseen_terms(list(state.info.tokens)))
        return [word for word, token in state.info.terms if token in unseen]


class JudgePapers:
    """Judge each candidate paper of a which-papers question (asked in the plural): the question asked of one paper
    (``QuestionInfo.polar``: "Does the paper use flow matching?") over that paper's
    sentences, one token in the yes/no slot (:func:`~citerag.service.answering.prompts.paper_messages`), read as
    ``P(yes)``. A paper is named when ``ratio * P(yes) >= min_score``, ``ratio`` being its best sentence's share of
    the best sentence's score: retrieval's say and the model's together. Over a corpus whose papers are read whole
    (``read_paper`` enabled), a candidate whose score reaches ``min_score_whole`` is asked again over the paper read
    whole, from its saved state in the answer slot (:func:`~citerag.service.answering.prompts.
    paper_whole_messages`; ~0.6 s on 2 cores against ~1.0 s for the first), and is named when the score times that
    P(yes) reaches ``min_score_whole``: a paper whose sentences share the question's words ("unlearning
    benchmarks") but whose abstract does not do what is asked is told apart. The evidence becomes each named paper's
    best sentence about its own work (emitted again); the answer is those sentences, each paper named
    (``state.papers_judged``: no single judgement, no writing); each is streamed (``"token"``), as compose will
    write it, as soon as its paper is named, so the first paper shows while the others are judged. None named: the
    service abstains.

    Args:
        generator: the loaded chat model.
        min_score: :data:`MIN_PAPER_SCORE`.
        describe: an unnamed paper's topic phrase (:func:`~citerag.service.answering.verify.named_subjects`).
        read_paper: the pipeline's read-paper step, which reads a candidate paper whole (``None``: never).
        min_score_whole: :data:`MIN_PAPER_SCORE_WHOLE`.
    """

    name = "judge_papers"

    def __init__(
        self, generator: Generator, min_score: float = MIN_PAPER_SCORE, describe: Describe | None = None,
        read_paper: ReadPaper | None = None, min_score_whole: float = MIN_PAPER_SCORE_WHOLE,
    ) -> None:
        self.generator = generator
        self.min_score = min_score
        self.describe = describe
        self.read_paper = read_paper
        self.min_score_whole = min_score_whole

    def passes(self, state: AnswerState, items: list[Evidence], first: float, polar: str) -> bool:
        """Whether the paper of ``items`` (its evidence sentences) is named, its ``first`` score (``ratio *
        P(yes)``) known: against ``min_score``, or, when it is read whole, that score times the P(yes) over the
        paper read whole against ``min_score_whole`` (class docstring); the model time is added to ``state``."""
        whole = (self.read_paper.read_document(items[0].result.document)
                 if self.read_paper is not None and first >= self.min_score_whole else None)
        if whole is None:
            return first >= self.min_score
        choice = choose(self.generator, paper_whole_messages(polar, whole), YES_NO_GRAMMAR, ["yes", "no"],
                        pin=False, slot=ANSWER.slot)
        state.add_model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return first * choice.probabilities["yes"] >= self.min_score_whole

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        polar = state.info.polar
        if polar is None or not state.evidence:
            return
        by_doc: dict[str, list] = {}
        for item in state.evidence:
            by_doc.setdefault(item.doc_id, []).append(item)
        best = max(item.score for item in state.evidence)
        named: list[tuple[Evidence, float]] = []  # each named paper's sentence, and P(yes)
        for items in by_doc.values():
            choice = choose(self.generator, paper_messages(polar, items), YES_NO_GRAMMAR, ["yes", "no"], pin=False,
                            slot=DECISION_SLOT, fixed=1)
            state.add_model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
            p_yes = choice.probabilities["yes"]
            if self.passes(state, items, max(item.score for item in items) / best * p_yes, polar):
                shown = own_work_first(sorted(items, key=lambda e: -e.score), JUDGED_OWN_SCORE_RATIO)
                named.append((shown, p_yes))
                # the answer's sentence for this paper, as compose will write it, streamed as soon as it is known
                shown_items = [item for item, _ in named]
                text = statement_text(paper_statements(shown_items, self.describe)[-1], shown_items, labelled=True)
                if state.emit("token", f" {text}" if len(named) > 1 else text):
                    break
        self.generator.pin(paper_messages(polar, []), slot=DECISION_SLOT, fixed=1)
        state.papers_judged = True
        if not named:
            state.abstain("no retrieved paper is judged to answer the question")
            return
        state.confidence = max(p for _, p in named)
        state.evidence = grouped([shown for shown, _ in named])
        state.emit("evidence", state.evidence)
