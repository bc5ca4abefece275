"""Verification of the model's choices: the calibrated decision and the abstention score.

* Decision: ``argmax_c log p(c) + bias_c`` over yes/no/maybe, where ``p`` is the model's probability given the
  evidence (:func:`~citerag.service.answering.generate.decide`) and ``bias`` a per-class offset fitted on dev questions
  (PubMedQA's odd half): the "contextual calibration" of Zhao et al. 2021 (ICML), which corrects a small model's
  prior towards one label without changing how it reads the evidence.
* Abstention: the answer's confidence is the model's probability that the sentence it rests on answers the
  question (:func:`~citerag.service.answering.generate.relevance`); the service abstains below :data:`MIN_CONFIDENCE`, or
  before asking the model when retrieval found no passage close to the question (best cosine below
  ``min_dense_score``).
* Unseen terms: a question whose content words include one that no indexed passage holds
  (:func:`content_terms`, the backend's ``unseen_terms``: "glacier" over ML abstracts) is often about something
  the corpus does not cover; such a question is answered only when the confidence reaches the higher
  :data:`MIN_CONFIDENCE_UNSEEN`, so the evidence must make up for the missing word (a paraphrase, a synonym); only
  over a corpus of :data:`MIN_VOCABULARY_FOR_UNSEEN` terms or more, where ordinary words are not missing.
  Yes/no questions keep their decision: on PubMedQA's dev half their titles' words are often absent from the
  abstract that answers them ("Literacy after hemispherectomy: can the right hemisphere read?"), and the rule
  cost 2 right decisions of 40 (``eval/results/qa.md``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache

from citerag.index.tokenize import tokenize

#: Per-class log-probability offsets for yes/no/maybe. After the draft (:func:`~citerag.service.answering.generate.decide`)
#: none is needed: on PubMedQA's dev half the best offsets gained 1 question of 59 (``eval/results/qa.md``), so
#: they are zero; the mechanism stays for a model whose prior leans to one label.
DECISION_BIAS: dict[str, float] = {"yes": 0.0, "no": 0.0, "maybe": 0.0}
#: Below this confidence the service abstains (chosen on dev questions; ``eval/results/qa.md``).
MIN_CONFIDENCE = 0.2
#: The confidence a question with an unseen content term needs: the highest threshold that cost no right answer on
#: the shipped corpus's dev half and the ML dev set (``eval/results/qa.md``).
MIN_CONFIDENCE_UNSEEN = 0.4
#: The unseen-word rule needs a corpus with at least this many distinct (stemmed) terms: about the 8,000-9,000 word
#: families a reader needs for ordinary English text (Nation 2006, Canadian Modern Language Review 63(1)). In a smaller
#: corpus ordinary words ("need", "database") are absent too: over the 38 shipped abstracts (1,608 terms) the rule
#: turned 3 right answers of the test half into abstentions (``eval/results/qa.md``); COVID-QA's 98 papers hold
#: 18,541 terms, PubMedQA's 1,000 abstracts 11,959, the 22,981 ML abstracts 46,245.
MIN_VOCABULARY_FOR_UNSEEN = 10_000

_WORD = re.compile(r"[^\W_]+", re.UNICODE)  # a compound's parts count, not its joined form ("face-verification")


@lru_cache(maxsize=1)
def _function_tokens() -> frozenset[str]:
    """BM25 tokens of English function words: scikit-learn's stop list (Glasgow IR group's, 318 words), which
    unlike the BM25 list holds question words ("how", "many", "which"), plus the auxiliary forms it lacks."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = [*ENGLISH_STOP_WORDS, "did", "does", "doing", "shall", "having"]
    return frozenset(t for word in words for t in tokenize(word))


def content_terms(question: str) -> list[tuple[str, str]]:
    """``(word, BM25 token)`` of each distinct content word of ``question``, in order: function words dropped,
    a hyphenated compound split into its words.

    >>> content_terms("How does the QuillFormer tokenizer split Sanskrit compound-words?")
    [('QuillFormer', 'quillform'), ('tokenizer', 'token'), ('split', 'split'), ('Sanskrit', 'sanskrit'), ('compound', 'compound'), ('words', 'word')]
    """
    function = _function_tokens()
    seen: dict[str, str] = {}
    for word in _WORD.findall(question):
        for token in tokenize(word):
            if token not in function and token not in seen:
                seen[token] = word
    return [(word, token) for token, word in seen.items()]


def calibrated_decision(probabilities: Mapping[str, float], bias: Mapping[str, float] = DECISION_BIAS) -> str:
    """The decision with the highest ``log p + bias`` (ties go to the first of yes, no, maybe).

    >>> calibrated_decision({"yes": 0.5, "no": 0.4, "maybe": 0.1}, {"yes": 0.0, "no": 0.3, "maybe": 0.0})
    'no'
    """
    def score(label: str) -> float:
        return math.log(max(probabilities.get(label, 0.0), 1e-12)) + bias.get(label, 0.0)

    return max(("yes", "no", "maybe"), key=score)
