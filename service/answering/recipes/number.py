"""Number questions ("How many ...?", "By how much ...?", "What accuracy ...?"): as fact questions, with the answer
asked for as a number and its unit. The numbers the model writes are checked digit for digit against the sentences
it cites (the rule ``numbers``, :mod:`~citerag.service.answering.verify`).
"""

from __future__ import annotations

from citerag.service.answering.question import QuestionKind
from citerag.service.answering.recipes.fact import Fact

REQUEST = (
    "Does the paper answer the question? Reply yes or no. If yes, answer the question on the next line in one "
    "sentence that gives the number with its unit."
)


class Number(Fact):
    """The number recipe (module docstring)."""

    kind: QuestionKind = "number"
    request = REQUEST
