"""Verification of the model's choices: the calibrated decision and the abstention score.

* Decision: ``argmax_c log p(c) + bias_c`` over yes/no/maybe, where ``p`` is the model's probability given the
  evidence (:func:`~citerag.service.answering.generate.decide`) and ``bias`` a per-class offset fitted on dev questions
  (PubMedQA's odd half): the "contextual calibration" of Zhao et al. 2021 (ICML), which corrects a small model's
  prior towards one label without changing how it reads the evidence.
* Abstention: the answer's confidence is the model's probability that the sentence it rests on answers the
  question (:func:`~citerag.service.answering.generate.relevance`); the service abstains below :data:`MIN_CONFIDENCE`, or
  before asking the model when retrieval found no passage close to the question (best cosine below
  ``min_dense_score``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: Per-class log-probability offsets for yes/no/maybe. After the draft (:func:`~citerag.service.answering.generate.decide`)
#: none is needed: on PubMedQA's dev half the best offsets gained 1 question of 59 (``eval/results/qa.md``), so
#: they are zero; the mechanism stays for a model whose prior leans to one label.
DECISION_BIAS: dict[str, float] = {"yes": 0.0, "no": 0.0, "maybe": 0.0}
#: Below this confidence the service abstains (chosen on dev questions; ``eval/results/qa.md``).
MIN_CONFIDENCE = 0.2


def calibrated_decision(probabilities: Mapping[str, float], bias: Mapping[str, float] = DECISION_BIAS) -> str:
    """The decision with the highest ``log p + bias`` (ties go to the first of yes, no, maybe).

    >>> calibrated_decision({"yes": 0.5, "no": 0.4, "maybe": 0.1}, {"yes": 0.0, "no": 0.3, "maybe": 0.0})
    'no'
    """
    def score(label: str) -> float:
        return math.log(max(probabilities.get(label, 0.0), 1e-12)) + bias.get(label, 0.0)

    return max(("yes", "no", "maybe"), key=score)
