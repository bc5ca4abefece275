"""Fixed inputs for the answering components' tests: passages from two domains (the shipped ML abstracts' style,
and COVID-19 / PubMed text) and a generator with fixed outputs (the real model runs in ``test_e2e.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.generator import Completion

COVID = (
    "Mother-to-child transmission (MTCT) is the main cause of HIV-1 infection in children worldwide. "
    "DC-SIGNR plays a crucial role in MTCT of HIV-1 [12, 13]. The study enrolled 197 mothers in Zimbabwe."
)
PUBMED = (
    "BACKGROUND: Mammography use is low among HMO women. RESULTS: Telephone counseling increased mammography "
    "use by 12% compared to usual care. CONCLUSIONS: Tailored print had no effect."
)
ML = ("Long contexts are costly. We propose LU-KV, a KV cache eviction method. LU-KV keeps 90% accuracy at "
      "10\\% memory, a $4\\times$ saving.")
ML2 = "We introduce GP-EquiFlow, a flow model with Gaussian process priors. GP-EquiFlow lowers error by 31%."


def result(doc_id: str, text: str, rank: int = 1, title: str = "", dense: float = 0.5) -> SearchResult:
    """One retrieved passage holding all of ``text`` (its document's whole text)."""
    document = Document(doc_id, title, text, title or text[:30])
    passage = Passage(f"{doc_id}#0", doc_id, 0, 0, len(text), text, 50)
    return SearchResult(rank, passage, document, 1.0, rank, rank, 1.0, dense)


class FixedGenerator:
    """A chat model with fixed outputs: ``written`` is the text the writer writes (streamed in 3-character pieces),
    ``judge`` the probability of "yes" for the judge's question (or a function of the judge's messages giving it),
    ``decision`` the yes/no/maybe probabilities."""

    fixed_messages = 7
    model_path = Path("fixed.gguf")

    def __init__(self, written: str = "", judge: float | Callable[[list], float] = 0.9,
                 decision: dict[str, float] | None = None) -> None:
        self.written, self.judge, self.decision = written, judge, decision or {"yes": 0.6, "no": 0.3, "maybe": 0.1}
        self.calls: list[dict] = []
        self.pins = 0

    def chat(self, messages, max_tokens, on_delta: Callable[[str], bool | None] | None = None, grammar=None,
             top_logprobs=0, pin=True, slot=0, fixed=None) -> Completion:
        self.calls.append({"messages": messages, "grammar": grammar, "pin": pin, "max_tokens": max_tokens,
                           "slot": slot, "fixed": fixed})
        if grammar is None:
            for i in range(0, len(self.written), 3):
                if on_delta is not None and on_delta(self.written[i:i + 3]):
                    break
            return Completion(self.written, 120, 20, 900.0, 800.0, "stop")
        judge = self.judge(messages) if callable(self.judge) else self.judge
        table = self.decision if "maybe" in grammar else {"yes": judge, "no": 1 - judge}
        logprobs = {token: math.log(max(p, 1e-9)) for token, p in table.items()}
        return Completion(max(table, key=table.get), 130, 1, 150.0, 30.0, "stop", (logprobs,))

    def pin(self, messages, slot=0, fixed=None) -> None:
        self.pins += 1


class FixedSearcher:
    """Returns ``results`` for every query (the first ``k``)."""

    def __init__(self, results: list[SearchResult]) -> None:
        self.results = results
        self.queries: list[str] = []

    def search(self, query, k=10, mode="hybrid", filters=None, **_):
        self.queries.append(query)
        return self.results[:k]
