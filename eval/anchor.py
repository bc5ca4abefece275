"""The plain-prompt anchor: the same model over the top retrieved document read whole, in one prompt, with no
rule of the answering pipeline. ``citerag eval --variant anchor`` runs it on the same questions as the service, so
that the service is measured against what the bare model does with the paper retrieval found.

The prompt is a system line, the document's title and text, the question and one request (answer from the paper in
one or two sentences, or reply "Not found."); decoding is greedy with the generator's limit of
:data:`ANCHOR_TOKENS`. An answer that opens with "Not found" is an abstention; every other answer cites the whole
document (one citation over its text), and a yes/no decision is its first word when that is "yes" or "no".
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

ANCHOR_SYSTEM = "You answer questions about a scientific paper from its title and abstract."
ANCHOR_REQUEST = (
    "Answer the question from this paper in one or two sentences. If the paper does not answer it, reply exactly: "
    "Not found."
)
#: The anchor's answer limit (tokens).
ANCHOR_TOKENS = 80
#: The llama.cpp slot the anchor uses (the answering pipeline's slots keep their own cached prefixes).
ANCHOR_SLOT = 0
_NOT_FOUND = re.compile(r"^\W*not found\b", re.IGNORECASE)
_DECISION = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def anchor_messages(question: str, top: SearchResult) -> list[dict[str, str]]:
    """The anchor's one prompt: :data:`ANCHOR_SYSTEM`, then the top document (title and text, readable), the
    question and :data:`ANCHOR_REQUEST`."""
    document = top.document
    paper = f"Title: {readable(document.title)}\n" if document.title.strip() else ""
    user = f"{paper}Abstract: {readable(document.text)}\n\nQuestion: {question}\n\n{ANCHOR_REQUEST}"
    return [{"role": "system", "content": ANCHOR_SYSTEM}, {"role": "user", "content": user}]


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
                                         slot=ANCHOR_SLOT, fixed=1)
        text = completion.text.strip()
        timings = {"retrieve": retrieved, "prompt": completion.prompt_ms, "generate": completion.generate_ms,
                   "total": (time.perf_counter() - started) * 1000}
        if not text or _NOT_FOUND.match(text):
            return Answer(question, NOT_FOUND, True, "the model replied: not found", [], list(passages), raw=text,
                          timings_ms=timings, completion_tokens=completion.completion_tokens)
        decision = _DECISION.match(text)
        whole = Citation(1, top, 0, len(top.document.text))
        return Answer(question, f"{text} [1]", False, "", [whole], list(passages), raw=text, timings_ms=timings,
                      completion_tokens=completion.completion_tokens,
                      decision=decision.group(1).lower() if decision else None)
