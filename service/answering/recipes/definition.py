"""Definition questions ("What is X?", "What does X stand for?"): as fact questions, the answer saying in one
sentence what X is.
"""

from __future__ import annotations

from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.fact import Fact

#: ``{subject}``: the thing asked about.
REQUEST = (
    "Does the paper say what {subject} is? Reply yes or no. If yes, say on the next line in one sentence what "
    "{subject} is."
)


class Definition(Fact):
    """The definition recipe (module docstring)."""

    kind: QuestionKind = "definition"
    request = REQUEST

    def request_for(self, question: Question) -> str:
        return self.request.format(subject=question.subject or "it")
