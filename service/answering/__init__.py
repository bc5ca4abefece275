"""Evidence-first answering: the model chooses and decides, the service writes the cited answer.

Stages, in data-flow order: :mod:`.evidence` (sentences of the retrieved passages, scored) -> :mod:`.prompt`
(the constrained prompts and grammars) -> :mod:`.generate` (the model's probabilities over the options) ->
:mod:`.verify` (calibrated decision, abstention) -> :mod:`.compose` (the answer and its citations);
:mod:`.answerer` runs them in order.
"""

from citerag.service.answering.answerer import EvidenceAnswerer
from citerag.service.answering.types import NOT_FOUND, Answer, Citation

__all__ = ["NOT_FOUND", "Answer", "Citation", "EvidenceAnswerer"]
