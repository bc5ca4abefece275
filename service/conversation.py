"""Follow-up questions made standalone before retrieval, without a model call.

A chat sends the whole conversation; citerag retrieves for one question. :func:`standalone` turns the last user
question into the question that is answered (``question_used`` in the response):

1. A question that can stand alone is answered as it is, at no cost (a few regular expressions): it has no
   reference back (:data:`ANAPHORA`: *it, its, they, this, these, the method, the paper* ...), is not a bare
   continuation (*and ..., what about ...*) and has more than :data:`SHORT_QUESTION_TERMS` content terms -- or it
   names its own subject (a coined name such as ``GP-SeedNet``).
2. A follow-up takes its subject from the previous user question (itself made standalone first, so a three-turn
   thread carries the subject along): the coined or capitalised name it asked about (``TERRA``, ``Tidal
   Transformer``), else the phrase that describes its paper ("the paper on seed banks": :func:`described_subject`),
   replaces the first reference back ("What does it use?" -> "What does GP-SeedNet use?"; "its" -> "GP-SeedNet's";
   "this trial" -> "the TMV-2 trial"). With no subject to carry, the previous question is appended in brackets, so
   its terms join the retrieval query and the question the model judges evidence against.
3. The documents the previous answer cited (``doc_ids`` of an assistant turn, when the client sends them) are
   kept as candidates: :func:`keep_candidates` puts the best passage of one of them in the last slot when
   retrieval for the follow-up found none of them.

Previous *answers* never contribute text: only user questions are read, and only retrieved passages can be
cited, so nothing an assistant turn says can become evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from citerag.index.search import SearchResult
from citerag.index.tokenize import tokenize
from citerag.service.answering.language import FUNCTION_WORDS, RESEARCH_NOUNS
from citerag.service.answering.names import names_in

#: A follow-up with at most this many content terms (BM25 tokens) is read as a continuation of the thread.
SHORT_QUESTION_TERMS = 2

#: References back to something named earlier in the thread (case-insensitive, whole words): a pronoun, a
#: demonstrative before any noun ("this trial", "these models"), or "the" / "that" before a word for a paper's
#: subject (:data:`~citerag.service.answering.language.RESEARCH_NOUNS`: "the method", "that model"); "that" before
#: other words is mostly a conjunction ("shows that transformers ...").
ANAPHORA = re.compile(
    rf"\b(?:(?:this|these|those|such|said) (?:same |proposed |above |new )?(?!(?:{'|'.join(FUNCTION_WORDS)})\b)"
    r"[a-z][\w-]*|"
    rf"(?:the|that) (?:same |proposed |above |new )?(?:{'|'.join(sorted(RESEARCH_NOUNS))})|"
    r"it|its|itself|they|them|their|theirs|this|these|those|the former|the latter|the same)\b",
    re.IGNORECASE,
)
# An "it" that refers to nothing: "is it true that", "makes it possible", "it is known that".
_EXPLETIVE = re.compile(
    r"\b(?:is it (?:true|possible|the case)|makes? it|made it|it (?:is|was) \w+ (?:to|that|whether))\b", re.IGNORECASE
)
#: A bare continuation: "And the speed-up?", "What about ImageNet?", "How about mice?".
CONTINUATION = re.compile(r"^\s*(?:and|also|what about|how about|and what|then|so)\b", re.IGNORECASE)
_POSSESSIVE = frozenset({"its", "their", "theirs"})
_DETERMINERS = frozenset({"the", "this", "that", "these", "those", "such", "said"})
_QUESTION_WORDS = frozenset(
    "what which who whom whose when where why how does do did is are was were can could should would will has have "
    "had in on for of and or the a an list name give tell".split()
)
_CAPITALISED = re.compile(r"(?<![\w-])[A-Z][\w-]+")
# Runs of capitalised words ("Tidal Transformer", "Gaussian Processes"), of two or more.
_TITLE_RUN = re.compile(r"\b[A-Z][\w-]*(?:\s+(?:of |for |and |the )?[A-Z][\w-]*)+")


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier message of a conversation.

    Attributes:
        role: ``"user"`` (a question) or ``"assistant"`` (an answer; its text is never read).
        content: the message text.
        doc_ids: for an assistant turn, the documents its answer cited (optional; kept as candidates).
    """

    role: Literal["user", "assistant"]
    content: str
    doc_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Standalone:
    """The question a conversation's last message stands for.

    Attributes:
        question: the standalone question, retrieved for and answered (``question_used``).
        rewritten: whether it differs from the question as asked.
        reason: why it was rewritten (``"refers back: 'it'"``, ``"continuation"``, ``"short"``), ``""`` if not.
        subject: the name carried from the previous question, ``""`` when none was (the question was appended).
        keep: documents the previous answer cited, to keep as candidates (empty unless rewritten).
    """

    question: str
    rewritten: bool = False
    reason: str = ""
    subject: str = ""
    keep: tuple[str, ...] = ()


def follow_up_reason(question: str) -> str:
    """Why ``question`` cannot stand alone, or ``""`` when it can.

    It is a follow-up when it refers back (:data:`ANAPHORA`, an expletive "it" excepted) before naming anything
    (a question that names its subject first, "Does TERRA beat its baselines?", stands alone), when it starts as a
    continuation (:data:`CONTINUATION`), or when it names nothing and has at most :data:`SHORT_QUESTION_TERMS`
    content terms ("Why?", "Side effects?").

    >>> follow_up_reason("Which benchmarks was it evaluated on?")
    "refers back: 'it'"
    >>> follow_up_reason("How many parameters does TERRA have?")
    ''
    """
    if (match := _reference(question)) is not None:
        return "" if names_in(question[: match.start()]) else f"refers back: {match.group(0)!r}"
    if CONTINUATION.match(question):
        return "continuation"
    if not names_in(question) and len(set(tokenize(question))) <= SHORT_QUESTION_TERMS:
        return "short"
    return ""


def _reference(question: str) -> re.Match[str] | None:
    """The first reference back in ``question`` (an expletive "it" skipped), or ``None``."""
    for match in ANAPHORA.finditer(question):
        if not (match.group(0).lower() == "it" and _EXPLETIVE.search(question)):
            return match
    return None


def subject_of(question: str) -> str:
    """The name a question asks about: its first coined name (``GP-SeedNet``), else its first run of two or more
    capitalised words that is not the question's opening (``Tidal Transformer``), else its first capitalised
    word after the opening (``Polaris``, ``K-live``), else ``""``.

    >>> subject_of("What is the Tidal Transformer?")
    'Tidal Transformer'
    """
    if names := names_in(question):
        return names[0]
    for match in _TITLE_RUN.finditer(question):
        words = match.group(0).split()
        while words and words[0].lower() in _QUESTION_WORDS:
            words = words[1:]
        if len(words) >= 2:
            return " ".join(words)
    return next((word for word in _CAPITALISED.findall(question[1:]) if word.lower() not in _QUESTION_WORDS), "")


# A phrase that describes a paper by what it does or is about: "the paper on seed banks", "the method that sorts
# seeds"; it runs to a comma, a question mark or "and".
_DESCRIBED = re.compile(
    r"\b(?:the|this|that)\s+(?:paper|work|study|method|model|approach|framework|article|system)\s+(?:on|about|that|"
    r"which|for|proposing|introducing|with|where)\s+[^?,;]+?(?=\s+and\b|[?,;]|$)",
    re.IGNORECASE,
)
_INVERTED = re.compile(r"^\s*(?:what|which|how|why|where|when)\b[^?]*?\b(?:do|does|did)\b", re.IGNORECASE)


def described_subject(question: str) -> str:
    """The phrase by which ``question`` describes the paper it asks about ("the paper on seed banks"), without the
    main verb an inverted question ends with ("Which crops does the paper on seed banks study?"); ``""`` when it
    describes none.

    >>> described_subject("Which crops does the paper on seed banks study?")
    'the paper on seed banks'
    >>> described_subject("How cold is the method that stores seeds in foil?"), described_subject("What is X?")
    ('the method that stores seeds in foil', '')
    """
    match = _DESCRIBED.search(question)
    if match is None:
        return ""
    phrase = match.group(0).strip()
    if _INVERTED.match(question[: match.start()] + " ") and not question[match.end():].strip(" ?"):
        phrase = phrase.rsplit(" ", 1)[0]  # "does the paper on X study?": the verb ends the question
    return phrase


def standalone(question: str, history: Sequence[Turn] = ()) -> Standalone:
    """The standalone form of ``question`` given the earlier turns ``history`` (oldest first).

    Earlier user questions are made standalone in order, so each follow-up takes its subject from the previous
    standalone question. Without history, or when ``question`` stands alone (:func:`follow_up_reason`), it is
    returned unchanged with ``rewritten=False``.
    """
    question = question.strip()
    if not history:
        return Standalone(question)
    previous: Standalone | None = None
    keep: tuple[str, ...] = ()
    for turn in history:
        if turn.role == "user" and turn.content.strip():
            previous = _resolve(turn.content.strip(), previous, ())
            keep = ()
        elif turn.role == "assistant" and turn.doc_ids:
            keep = tuple(turn.doc_ids)
    return _resolve(question, previous, keep)


def _resolve(question: str, previous: Standalone | None, keep: tuple[str, ...]) -> Standalone:
    if previous is None or not (reason := follow_up_reason(question)):
        return Standalone(question)
    # a thread keeps its subject: a rewritten previous question passes on the one it carried
    subject = ((previous.rewritten and previous.subject) or subject_of(previous.question)
               or described_subject(previous.question))
    match = _reference(question)
    if subject and match is not None:
        rewritten = question[: match.start()] + _replacement(match.group(0), subject) + question[match.end():]
    else:
        context = previous.question.rstrip(" ?.!")
        rewritten = f"{question.rstrip()} (follow-up to: {context})"
    return Standalone(rewritten, True, reason, subject, keep)


def check_history(history: Sequence[Turn], max_turns: int, max_chars: int) -> None:
    """Check ``history`` against the configured bounds.

    Raises:
        ValueError: more than ``max_turns`` turns, or more than ``max_chars`` characters of content in all (the
            message gives both figures).
    """
    if len(history) > max_turns:
        raise ValueError(f"at most {max_turns} turns of history are accepted, got {len(history)}")
    chars = sum(len(turn.content) for turn in history)
    if chars > max_chars:
        raise ValueError(f"at most {max_chars} characters of history are accepted, got {chars}")


def latest_turns(history: Sequence[Turn], max_turns: int, max_chars: int) -> list[Turn]:
    """The latest turns of ``history`` that fit ``max_turns`` turns and ``max_chars`` characters (oldest first):
    how a chat client's whole conversation is bounded."""
    kept: list[Turn] = []
    chars = 0
    for turn in reversed(history[-max_turns:] if max_turns else []):
        chars += len(turn.content)
        if chars > max_chars:
            break
        kept.append(turn)
    return kept[::-1]


def _replacement(said: str, subject: str) -> str:
    """What stands for the reference ``said`` once ``subject`` is known: the subject for a pronoun ("it"), its
    possessive for "its"/"their", and the noun phrase with the subject for "the method", "this trial", "these
    models" ("the QK-Vault method", "the TMV-2 trial"): the study of a subject is not the subject."""
    words = said.split()
    if len(words) > 1 and words[0].lower() in _DETERMINERS:
        return f"the {subject} {' '.join(words[1:])}"
    if said.lower() in _POSSESSIVE:
        return f"{subject}'" if subject.endswith("s") else f"{subject}'s"
    return subject


def keep_candidates(
    results: list[SearchResult], keep: Sequence[str], search_kept: Callable[[list[str]], list[SearchResult]]
) -> list[SearchResult]:
    """``results`` with a passage of the kept documents in the last slot when none of them was retrieved.

    Args:
        results: the follow-up's ranked passages (best first).
        keep: ids of the documents the previous answer cited.
        search_kept: the same search restricted to the given document ids (best first).

    Returns:
        ``results`` unchanged when it is empty, ``keep`` is empty or a kept document is among them; otherwise the
        list with its last passage replaced by the best passage of the kept documents (ranked as the one it
        replaced), or unchanged when the restricted search finds none.
    """
    if not results or not keep or any(r.passage.doc_id in keep for r in results):
        return results
    found = search_kept(list(keep))
    if not found:
        return results
    return [*results[:-1], found[0].replace(rank=results[-1].rank)]
