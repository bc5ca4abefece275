"""The plain-prompt anchor: the same model over the top retrieved document read whole, in one prompt, with no
rule of the answering pipeline. ``citerag eval --variant anchor`` runs it on the same questions as the service, so
that the service is measured against what the bare model does with the paper retrieval found.

The prompt is one user turn: the document's title and text, one request (answer using only the abstract in one or
two sentences, or say that it does not contain the answer) and the question; decoding is greedy with a limit of
:data:`ANCHOR_TOKENS`. Of three wordings tried on 24 questions of the ML dev half (a system line and "reply exactly:
Not found" 10 right; a system line, "Answer briefly" 16; this one 20), this one answered best. An answer that says it
finds nothing (:data:`DECLINED`) is an abstention; every other answer cites the whole document (one citation over
its text), and a yes/no decision is its first word when that is "yes" or "no".
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from citerag.index.backend import Searcher
from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering import NOT_FOUND, Answer, Citation
from citerag.service.generator import Generator

ANCHOR_REQUEST = (
    "Using only the abstract above, answer the question in one or two sentences. If the abstract does not contain "
    "the answer, say so."
)
#: The anchor's answer limit (tokens).
ANCHOR_TOKENS = 80
#: The llama.cpp slot the anchor uses (the answering pipeline's slots keep their own cached prefixes).
ANCHOR_SLOT = 0
#: What an answer that finds nothing says.
DECLINED = re.compile(
    r"not found|not (?:mentioned|provided|stated|specified|given)"
    r"|does not (?:mention|provide|say|state|specify|contain)|no information|cannot be (?:found|determined)",
    re.IGNORECASE,
)
_DECISION = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def anchor_messages(question: str, top: SearchResult) -> list[dict[str, str]]:
    """The anchor's one prompt: the top document (title and text, readable), :data:`ANCHOR_REQUEST` and the
    question."""
    document = top.document
    paper = f"Title: {readable(document.title)}\n" if document.title.strip() else ""
    user = f"{paper}Abstract: {readable(document.text)}\n\n{ANCHOR_REQUEST}\n\nQuestion: {question}"
    return [{"role": "user", "content": user}]


class PlainPrompt:
    """The anchor answerer (module docstring): ``ask(question, k)`` like the service's pipeline.

    Args:
        searcher: the index's searcher (hybrid search, as the service's).
        generator: the loaded chat model (the service's).
        max_tokens: :data:`ANCHOR_TOKENS`.
    """

    def __init__(self, searcher: Searcher, generator: Generator, max_tokens: int = ANCHOR_TOKENS) -> None:
        self.searcher = searcher
        self.generator = generator
        self.max_tokens = max_tokens

    def ask(self, question: str, k: int = 8) -> Answer:
        """Answer ``question`` from the top document of a hybrid top-``k`` search (module docstring)."""
        started = time.perf_counter()
        passages: Sequence[SearchResult] = self.searcher.search(question, k=k, mode="hybrid")
        retrieved = (time.perf_counter() - started) * 1000
        if not passages:
            return Answer(question, NOT_FOUND, True, "no passage matched the question", [], [],
                          timings_ms={"retrieve": retrieved, "total": retrieved})
        top = passages[0]
        completion = self.generator.chat(anchor_messages(question, top), max_tokens=self.max_tokens, pin=False,
                                         slot=ANCHOR_SLOT, fixed=0)
        text = completion.text.strip()
        timings = {"retrieve": retrieved, "prompt": completion.prompt_ms, "generate": completion.generate_ms,
                   "total": (time.perf_counter() - started) * 1000}
        if not text or DECLINED.search(text):
            return Answer(question, NOT_FOUND, True, "the model found no answer in the paper", [], list(passages),
                          raw=text, timings_ms=timings, completion_tokens=completion.completion_tokens)
        decision = _DECISION.match(text)
        whole = Citation(1, top, 0, len(top.document.text))
        return Answer(question, f"{text} [1]", False, "", [whole], list(passages), raw=text, timings_ms=timings,
                      completion_tokens=completion.completion_tokens,
                      decision=decision.group(1).lower() if decision else None)
