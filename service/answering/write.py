"""The write step: the model writes the answer from the chosen evidence (:func:`~citerag.service.answering.prompts.writer_messages`),
streamed as it is written, and a yes/no question gets its decision.

The model cites evidence sentences as ``[i]`` (their numbers in the prompt); the stream shows each marker as the
``[n]`` of the passage holding that sentence, the number the final answer uses (:class:`MarkerStream`).

A yes/no question is answered in its own conversation and slot (:func:`~citerag.service.answering.prompts.conclusion_messages`):
the model states in one sentence what the evidence concludes about the question (streamed: it is the answer's
text), then answers one word, yes, no or maybe, after its own conclusion
(:func:`~citerag.service.answering.prompts.decision_messages`). On PubMedQA's dev half a free conclusion before the
decision lifted accuracy from 0.41 to 0.56; asked to open with the decision, the model answered "No" to every yes/no
question of the dev sets (``eval/results/qa.md``). The echo of the request ("The abstract's results conclude that
...") is cut from the conclusion (:func:`without_echo`); the answer then opens with the decision (compose). A "yes"
after a conclusion that denies the question's main verb is read as "no" (:func:`denies`), and so is one the model
gives at P(yes) below :data:`MIN_YES` (the likelier of "no" and "maybe" then), unless every conclusion states the
question as true, every one of its words, with no negation or hedge (:func:`affirms`: "... can drop activation
functions entirely" for "Can vision backbones drop activation functions entirely?", at P(yes) 0.64).

Two readings of the evidence: over a corpus whose papers are not read whole up front (more than
:data:`~citerag.service.answering.whole_paper.MAX_DOCUMENTS` documents), the conclusion and decision over the chosen
sentences (streamed: the answer's text) are followed by a silent conclusion and decision over the answer's paper read
whole (:meth:`~citerag.service.answering.whole_paper.ReadPaper.second_reading`); the decision is taken on the mean of
the two probability tables (an ensemble of two views, as self-consistency averages several samples: Wang et al. 2023,
ICLR). On PubMedQA dev100 each reading alone is right on 62 and the mean on 66 (as built, 64); held out (test100)
61 -> 67; the ML dev set's yes/no questions 12 of 14 each way (``eval/results/qa.md``, twentieth round). It costs
the paper's reading, an estimated 4-5 s on 2 cores (not timed alone). Over a small corpus the paper read whole is
the evidence already (its state saved ahead), and one reading decides, within the yes/no time budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import regex

from citerag.service.answering.choice import choose
from citerag.service.answering.evidence import Evidence, holds
from citerag.index.text import readable
from citerag.index.tokenize import tokenize
from citerag.service.answering.language import DENIAL, HEDGE, NEGATION_CUE, SAME_CLAIM_STEMS
from citerag.service.answering.names import paper_label
from citerag.service.answering.prompts import (
    ANSWER_SLOT,
    DECISION_GRAMMAR,
    DECISION_SLOT,
    conclusion_messages,
    decision_messages,
    writer_messages,
)
from citerag.service.answering.state import AnswerState
from citerag.service.answering.verify import negated_terms
from citerag.service.generator import Generator

#: The writer's token limit: one to three sentences (a sentence is ~25-40 tokens).
MAX_ANSWER_TOKENS = 120
DECISIONS = ("yes", "no", "maybe")
#: A "yes" is a claim the evidence must carry: below this P(yes) the decision is the likelier of "no" and "maybe".
#: The model leans to "yes" (the majority-label bias of small language models: Zhao et al. 2021, "Calibrate Before
#: Use", ICML): the ML dev set's false premises got "yes" at P(yes) 0.63-0.86, every right "yes" of the ML dev and
#: seed sets 0.80 or more. The bar is the one every answer needs (:data:`~citerag.service.answering.judge.
#: MIN_CONFIDENCE`; a test keeps the two equal, as the judge imports this module through compose); over the stored
#: dev decisions (PubMedQA dev100, ML dev, seed) no bar from 0.5 to 0.85 gets more right (eval/results/qa.md).
MIN_YES = 0.65
_FIRST_WORD = re.compile(r"^\W*(\w+)")
# The request's echo at a conclusion's start, after any decision word: "the abstract('s results) conclude(s) that".
_ECHO = regex.compile(  # regex: partial matches (EchoCut)
    r"^((?:yes|no|maybe)\b[,.]?\s*)?(?:the |this )?(?:abstract|evidence|study|paper)(?:'s (?:results|findings))?\s+"
    r"(?:conclude|show|suggest|indicate|state|find)s?\s+that\s+",
    regex.IGNORECASE,
)


class MarkerStream:
    """Pieces of the model's text as the reader should see them: each ``[i]`` evidence marker rewritten as the
    ``[n]`` of its passage (a marker split across pieces is held until it closes), leading space dropped.

    Args:
        evidence: the evidence in prompt order (``[i]`` is ``evidence[i - 1]``).
        emit: receives each readable piece; returns True to stop.
    """

    def __init__(self, evidence: Sequence[Evidence], emit) -> None:  # noqa: ANN001 - Callable[[str], bool]
        self.evidence = evidence
        self.emit = emit
        self.pending = ""
        self.started = False

    def feed(self, piece: str) -> bool:
        """Take the next piece of model text; True once the listener asked to stop."""
        text = self.pending + piece
        self.pending = ""
        cut = text.rfind("[")
        if cut != -1 and "]" not in text[cut:] and len(text) - cut <= 8:
            text, self.pending = text[:cut], text[cut:]
        return self._send(text)

    def flush(self) -> bool:
        """Send what is held (an unclosed ``[`` at the very end)."""
        text, self.pending = self.pending, ""
        return self._send(text)

    def _send(self, text: str) -> bool:
        text = re.sub(r"\[(\d{1,3})\]", self._marker, text)
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        return bool(text) and bool(self.emit(text))

    def _marker(self, match: re.Match[str]) -> str:
        i = int(match.group(1))
        return f"[{self.evidence[i - 1].n}]" if 1 <= i <= len(self.evidence) else ""


def denies(conclusion: str, question: str) -> bool:
    """Whether ``conclusion`` denies what ``question`` asks: it denies a main verb (:data:`~citerag.service.answering.
    language.DENIAL`: "does not need", "cannot") and the question denies none. The model's one-word decision does not
    always follow its own conclusion (seed question s023: "The defense does not need to know ...", then "yes" at
    P = 0.48); the conclusion, a sentence it writes, is the better reading.

    >>> denies("The defense does not need to know the attack.", "Does the defense need to know the attack?")
    True
    >>> denies("X is better, with no extra cost.", "Is X better?"), denies("X isn't slower.", "Isn't X slower?")
    (False, False)
    """
    return bool(DENIAL.search(conclusion)) and not DENIAL.search(question)


def affirms(conclusion: str, question: str, asked: set[str]) -> bool:
    """Whether ``conclusion`` states what a yes/no ``question`` asks as true: it holds every content term of the
    question (``asked``, BM25 tokens; a term also in a longer word, :data:`DENIAL_PREFIX_CHARS`), and it negates
    (:data:`~citerag.service.answering.language.NEGATION_CUE`, :data:`~citerag.service.answering.language.DENIAL`)
    and hedges (:data:`~citerag.service.answering.language.HEDGE`: "may", "unclear") nothing the question does not.
    The counterpart of :func:`denies`: the conclusion is a sentence the model writes, the better reading when its
    one-word decision is unsure.

    >>> asked = {"vision", "backbon", "drop", "activ", "function", "entir"}
    >>> question = "Can vision backbones drop activation functions entirely?"
    >>> affirms("The abstract concludes that vision backbones can drop activation functions entirely.", question, asked)
    True
    >>> affirms("Vision backbones cannot drop activation functions entirely.", question, asked)
    False
    >>> affirms("Vision backbones may drop activation functions entirely.", question, asked)
    False
    >>> affirms("Vision backbones can drop activation functions.", question, asked)  # not "entirely"
    False
    """
    if not asked:
        return False
    for cue in (NEGATION_CUE, DENIAL, HEDGE):
        if cue.search(conclusion) and not cue.search(question):
            return False
    tokens = set(tokenize(conclusion))
    return all(holds(term, tokens, DENIAL_PREFIX_CHARS) for term in asked)


#: Question terms a negated scope must hold to deny the question: one shared word ("no significant change in
#: mortality" against "Does X reduce mortality?") is not the question's claim.
MIN_NEGATED_TERMS = 2
#: A claim of at least this many terms is denied by a sentence that lacks one of them: a question's generic word
#: ("Does X add extra parameters to the model?") need not be repeated by the sentence that denies it.
CLAIM_TERMS_FOR_SLACK = 4
#: A claim term this long is held in a longer word it begins ("add" in "additional"): shorter than evidence
#: scoring's :data:`~citerag.service.answering.evidence.MIN_PREFIX_CHARS`, as the sentence must also hold the rest
#: of the claim and negate two of its terms.
DENIAL_PREFIX_CHARS = 3


def denying_evidence(question: str, asked: set[str], sentences: Sequence[str],
                     labels: Sequence[str | None]) -> int | None:
    """The index of the first evidence sentence that negates what a yes/no ``question`` asks, or ``None``: a
    sentence that holds every content term of the question (``asked``, BM25 tokens) but those of its paper's name
    (``labels[i]``: the subject, "Regret Pre-training", which the sentence may call "the framework"), or all but one
    of a claim of :data:`CLAIM_TERMS_FOR_SLACK` terms or more, with a negation whose scope (:func:`negated_terms`)
    holds :data:`MIN_NEGATED_TERMS` of them. A term is held in a longer form too (:data:`DENIAL_PREFIX_CHARS`:
    "add" in "additional") and a requirement in any of its words (:data:`~citerag.service.answering.language.
    SAME_CLAIM_STEMS`: "need" in "not required"). A question that negates anything itself is left alone. A
    sentence that negates part of a longer question ("... but not unilateral knee pain" for "Does obesity predict
    knee pain over fourteen years in women?") lacks several of its terms.

    >>> sentences = ["This paper introduces Regret Pre-training.", "It introduces no additional parameters."]
    >>> asked = {"regret", "pre", "train", "introduc", "addit", "paramet"}
    >>> denying_evidence("Does Regret Pre-training introduce additional parameters?", asked, sentences,
    ...                  ["Regret Pre-training"] * 2)
    1
    >>> denying_evidence("Does Regret Pre-training introduce additional parameters?", asked, sentences, [None] * 2)
    >>> denying_evidence("Does Regret Pre-training not introduce additional parameters?", asked, sentences,
    ...                  ["Regret Pre-training"] * 2)
    >>> denying_evidence("Does Regret Pre-training add parameters?", {"regret", "pre", "train", "add", "paramet"},
    ...                  sentences, ["Regret Pre-training"] * 2)  # "add" held in "additional"
    1
    >>> denying_evidence("Does X add extra weights to the model?", {"x", "add", "extra", "weight", "model"},
    ...                  ["X adds no extra weights."], ["X"])  # four claim terms: "model" may be missing
    0
    """
    if NEGATION_CUE.search(question) or DENIAL.search(question):
        return None
    asked = _claim_stems(asked)
    for i, sentence in enumerate(sentences):
        claim = asked - _claim_stems(tokenize(labels[i] or ""))
        tokens, negated = _claim_stems(tokenize(sentence)), _claim_stems(negated_terms(sentence))
        slack = 1 if len(claim) >= CLAIM_TERMS_FOR_SLACK else 0
        if sum(holds(term, tokens, DENIAL_PREFIX_CHARS) for term in claim) >= len(claim) - slack and \
                sum(holds(term, negated, DENIAL_PREFIX_CHARS) for term in claim) >= MIN_NEGATED_TERMS:
            return i
    return None


def _claim_stems(tokens: Iterable[str]) -> set[str]:
    """``tokens`` (BM25 stems) with each requirement word as "need" (:data:`~citerag.service.answering.language.
    SAME_CLAIM_STEMS`)."""
    return {SAME_CLAIM_STEMS.get(token, token) for token in tokens}


def first_word_decision(text: str) -> str | None:
    """``"yes"``/``"no"``/``"maybe"`` when ``text`` opens with that word, else ``None``.

    >>> first_word_decision("No, ASMC does not need ..."), first_word_decision("ASMC reaches ...")
    ('no', None)
    """
    match = _FIRST_WORD.match(text)
    word = match.group(1).lower() if match else ""
    return word if word in DECISIONS else None


#: The most characters a yes/no conclusion's stream holds back while they may be the echo (which is at most ~55).
ECHO_HOLD = 72


def without_echo(text: str) -> str:
    """``text`` without the conclusion request's echo at its start (a decision word before it is kept).

    >>> without_echo("The abstract's results conclude that sparse libraries are not needed.")
    'Sparse libraries are not needed.'
    >>> without_echo("Yes, the abstract concludes that GP-EquiFlow needs fewer steps.")
    'Yes, GP-EquiFlow needs fewer steps.'
    """
    match = _ECHO.match(text)
    if match is None:
        return text
    rest = text[match.end():]
    decision = match.group(1) or ""
    return f"{decision}{rest[:1] if decision else rest[:1].upper()}{rest[1:]}"


class EchoCut:
    """A stream filter: holds the conclusion's first characters while they may be the request's echo, sends them
    without it (:func:`without_echo`), then passes the rest through, so the reader never sees "The abstract's
    results conclude that ...".

    Args:
        emit: receives each piece; returns True to stop.
    """

    def __init__(self, emit) -> None:  # noqa: ANN001 - Callable[[str], bool | None]
        self.emit = emit
        self.held: str | None = ""

    def feed(self, piece: str) -> bool:
        """Take the next piece; True once the listener asked to stop. What is held is sent as soon as it cannot
        become the echo (``"Manual r..."``: at once), once the echo is complete and a character follows it, or at
        :data:`ECHO_HOLD` characters."""
        if self.held is None:
            return bool(self.emit(piece))
        self.held += piece
        echo = _ECHO.match(self.held, partial=True)  # None: no continuation of what is held is the echo
        decided = echo is None or (not echo.partial and echo.end() < len(self.held))
        return (decided or len(self.held) >= ECHO_HOLD) and self.flush()

    def flush(self) -> bool:
        """Send what is held (at the end of the text)."""
        if not self.held:
            self.held = None
            return False
        text, self.held = without_echo(self.held), None
        return bool(self.emit(text))


class Write:
    """Write the answer: ``state.written`` (streamed as ``"token"`` events through :class:`MarkerStream`), and for
    a yes/no question ``state.decision``, decided after it (module docstring).

    Args:
        generator: the loaded chat model.
        max_tokens: the writer's token limit.
        min_yes: the P(yes) a "yes" needs (:data:`MIN_YES`); below it the decision is the likelier of "no" and
            "maybe".
        second_reading: a yes/no question's paper read whole, its conversation's start ready in
            :data:`DECISION_SLOT`, for a second, silent reading of the decision (``None``: none;
            :meth:`~citerag.service.answering.whole_paper.ReadPaper.second_reading`, over a corpus whose papers are
            not read whole up front). The decision is then taken on the mean of the two readings' probabilities
            (an ensemble of two views of the evidence, the chosen sentences and the whole abstract), and is "no"
            when either conclusion or either evidence denies the question (module docstring).

    Raises:
        ValueError: ``max_tokens`` below 8, or ``min_yes`` outside ``[0, 1]``.
    """

    name = "write"

    def __init__(self, generator: Generator, max_tokens: int = MAX_ANSWER_TOKENS, min_yes: float = MIN_YES,
                 second_reading: Callable[[AnswerState], Sequence[Evidence] | None] | None = None) -> None:
        if max_tokens < 8:
            raise ValueError(f"max_tokens must be >= 8, got {max_tokens}")
        if not 0.0 <= min_yes <= 1.0:
            raise ValueError(f"min_yes must be in [0, 1], got {min_yes}")
        self.generator = generator
        self.max_tokens = max_tokens
        self.min_yes = min_yes
        self.second_reading = second_reading

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        if state.papers_judged:
            return  # each named paper's own sentence is the answer
        if state.info.kind == "yes_no":
            self._decide(state)
            return
        messages = writer_messages(state.info, state.evidence)
        state.written = self._write(state, messages, pin=True, slot=ANSWER_SLOT, fixed=None)

    def _write(self, state: AnswerState, messages: list[dict[str, str]], pin: bool, slot: int,
               fixed: int | None, echo: bool = False) -> str:
        """The model's text for ``messages``, streamed as ``"token"`` events (``echo``: the request's echo held
        back, :class:`EchoCut`); timings and truncation recorded."""
        emit = lambda text: state.emit("token", text)  # noqa: E731
        cut = EchoCut(emit) if echo else None
        stream = MarkerStream(state.evidence, cut.feed if cut else emit)
        completion = self.generator.chat(messages, max_tokens=self.max_tokens, on_delta=stream.feed, pin=pin,
                                         slot=slot, fixed=fixed)
        stream.flush()
        if cut:
            cut.flush()
        state.add_model_time(completion.prompt_ms, completion.generate_ms, completion.completion_tokens)
        state.truncated = completion.finish_reason == "length"
        return completion.text.strip()

    def _decide(self, state: AnswerState, messages: list[dict[str, str]] | None = None, slot: int = DECISION_SLOT,
                fixed: int | None = 1) -> None:
        """A yes/no question: the conclusion (``messages``, default :func:`~citerag.service.answering.prompts.
        conclusion_messages` over the evidence), then the decision after it, in ``slot`` (default
        :data:`DECISION_SLOT`, the system prompt its one ``fixed`` message); with a second reading (class
        docstring), its decision probabilities averaged with this one's."""
        assert state.info is not None
        messages = messages or conclusion_messages(state.info, state.evidence)
        written = self._write(state, messages, pin=False, slot=slot, fixed=fixed, echo=True)
        state.written = without_echo(written)
        probabilities = self._decision(state, messages, written, slot, fixed)
        denied = denies(state.written, state.info.text)
        asked = set(state.info.tokens)
        affirmed = affirms(state.written, state.info.text, asked)
        whole = self.second_reading(state) if self.second_reading is not None and not state.stopped else None
        if whole is not None:  # the paper read whole, silently: its conclusion, its decision
            second = conclusion_messages(state.info, whole)
            completion = self.generator.chat(second, max_tokens=self.max_tokens, pin=False, slot=DECISION_SLOT,
                                             fixed=1)
            state.add_model_time(completion.prompt_ms, completion.generate_ms, completion.completion_tokens)
            concluded = completion.text.strip()
            other = self._decision(state, second, concluded, DECISION_SLOT, 1)
            probabilities = {d: (probabilities[d] + other[d]) / 2 for d in DECISIONS}
            denied = (denied or denies(without_echo(concluded), state.info.text)
                      or self._denying(state, whole) is not None)
            affirmed = affirmed and affirms(without_echo(concluded), state.info.text, asked)
        state.decision_probabilities = probabilities
        state.decision = max(DECISIONS, key=lambda d: probabilities[d])
        if state.decision == "yes" and probabilities["yes"] < self.min_yes and not affirmed:
            # a yes the model is unsure of, which no conclusion of its own states outright
            state.decision = max(("no", "maybe"), key=lambda d: probabilities[d])
        if state.decision == "yes" and denied:
            state.decision = "no"  # a conclusion says no: "... does not need to know which strategies ..."
        if state.decision == "yes" and (denial := self._denying(state, state.evidence)) is not None:
            # the evidence negates what is asked ("introduces no additional parameters"): the answer is no, in the
            # evidence's own words, whatever the model concluded
            state.decision = "no"
            state.written = f"{readable(state.evidence[denial].text)} [{denial + 1}]"

    def _decision(self, state: AnswerState, messages: list[dict[str, str]], written: str, slot: int,
                  fixed: int | None) -> dict[str, float]:
        """The model's probabilities of :data:`DECISIONS` after its ``written`` conclusion to ``messages``; the
        model time is added to ``state``."""
        choice = choose(self.generator, decision_messages(messages, written), DECISION_GRAMMAR, list(DECISIONS),
                        pin=True, slot=slot, fixed=fixed)
        state.add_model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return choice.probabilities

    @staticmethod
    def _denying(state: AnswerState, evidence: Sequence[Evidence]) -> int | None:
        """:func:`denying_evidence` of ``state``'s question over ``evidence``."""
        assert state.info is not None
        return denying_evidence(state.info.text, set(state.info.tokens),
                                [readable(item.text) for item in evidence],
                                [paper_label(item.result.document) for item in evidence])
