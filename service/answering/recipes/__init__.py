"""One recipe per question kind (:data:`RECIPES`): each declares which papers it reads, what it asks the model and
what it checks beyond the shared mechanics (:mod:`citerag.service.answering.recipes.base`)."""

from __future__ import annotations

from citerag.service.answering.recipes.base import Recipe, Tools
from citerag.service.answering.recipes.comparison import Comparison
from citerag.service.answering.recipes.definition import Definition
from citerag.service.answering.recipes.fact import Fact
from citerag.service.answering.recipes.number import Number
from citerag.service.answering.recipes.which_papers import WhichPapers
from citerag.service.answering.recipes.yes_no import YesNo

#: The recipe of each question kind (:data:`~citerag.service.answering.question.QuestionKind`).
RECIPES: dict[str, Recipe] = {recipe.kind: recipe for recipe in
                              (Fact(), Number(), Definition(), YesNo(), WhichPapers(), Comparison())}

__all__ = ["RECIPES", "Recipe", "Tools"]
