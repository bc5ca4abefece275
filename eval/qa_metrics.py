"""Question-answering metrics for COVID-QA-style span answers and PubMedQA-style decisions.

* Exact match and token-F1: SQuAD v1.1's definitions (Rajpurkar et al. 2016, the official ``evaluate-v1.1.py``):
  lower-cased, punctuation and the articles a/an/the removed, whitespace collapsed; F1 over the bag of tokens;
  the best over the gold answers.
* Gold-token recall: the share of the gold answer's (normalised) tokens the prediction contains.
* Span hit: a citation's character span ``[start, end)`` overlaps a gold answer span in the gold document.
* Decision accuracy and macro-F1 over the labels ``yes``/``no``/``maybe`` (a missing decision counts as wrong
  and is its own predicted label, so it lowers recall of the gold class).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_MARKER = re.compile(r"\[\d+(?:\s*[,;]\s*\d+)*\]")

DECISIONS = ("yes", "no", "maybe")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower case, punctuation removed, articles removed, whitespace collapsed.

    >>> normalize_answer("The  Cat, sat!")
    'cat sat'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def strip_markers(text: str) -> str:
    """``text`` without ``[n]`` citation markers (``"Yes [1][2]."`` -> ``"Yes ."``)."""
    return _MARKER.sub(" ", text)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """The best SQuAD token-F1 of ``prediction`` against ``golds`` (0.0 for an empty prediction).

    >>> round(token_f1("mother to child transmission", ["Mother-to-child transmission (MTCT)"]), 3)  # hyphens join
    0.286
    """
    return max((_f1(prediction, g) for g in golds), default=0.0)


def gold_recall(prediction: str, golds: Sequence[str]) -> float:
    """The best share of a gold answer's normalised tokens (as a bag) that ``prediction`` holds."""
    best = 0.0
    pred = Counter(normalize_answer(prediction).split())
    for gold in golds:
        ref = Counter(normalize_answer(gold).split())
        if ref:
            best = max(best, sum((pred & ref).values()) / sum(ref.values()))
    return best


def spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """True when half-open character spans ``a`` and ``b`` share at least one character."""
    return a[0] < b[1] and b[0] < a[1]


def span_hit(
    citations: Iterable[tuple[str, int, int]], gold_doc: str, gold_spans: Iterable[tuple[int, int]]
) -> bool:
    """True when a citation ``(doc_id, start, end)`` overlaps a gold span in ``gold_doc``."""
    spans = list(gold_spans)
    return any(doc == gold_doc and any(spans_overlap((s, e), g) for g in spans) for doc, s, e in citations)


def decision_scores(predicted: Sequence[str | None], gold: Sequence[str]) -> dict[str, float]:
    """Accuracy and macro-F1 (over :data:`DECISIONS`, the mean of per-class F1) of ``predicted`` decisions.

    >>> decision_scores(["yes", "no", None], ["yes", "yes", "no"])["accuracy"]
    0.3333333333333333
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold decisions")
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / max(1, len(gold))
    f1s = []
    for label in DECISIONS:
        tp = sum(p == label and g == label for p, g in zip(predicted, gold))
        fp = sum(p == label and g != label for p, g in zip(predicted, gold))
        fn = sum(p != label and g == label for p, g in zip(predicted, gold))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / len(f1s)}


def risk_coverage(confidence: Sequence[float], correct: Sequence[bool], points: int = 5) -> list[dict[str, float]]:
    """Accuracy of the most confident answers at ``points`` coverage levels (``1/points .. 1``): the
    risk-coverage curve of selective prediction (El-Yaniv & Wiener 2010). Returns ``[{"coverage", "accuracy"}]``."""
    order = sorted(range(len(confidence)), key=lambda i: -confidence[i])
    curve = []
    for step in range(1, points + 1):
        n = max(1, round(len(order) * step / points)) if order else 0
        kept = order[:n]
        curve.append({"coverage": n / max(1, len(order)), "accuracy": sum(correct[i] for i in kept) / max(1, n)})
    return curve
