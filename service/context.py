"""Context selection: the retrieved passages as the model reads them.

Passages of one document are put together in document order, and overlapping or adjacent ones are merged into one
block (the chunker overlaps neighbours by up to 64 word pieces, so two neighbours from one abstract would otherwise
repeat that text in the prompt and cost prompt-evaluation time, ~15-25 ms a token on 2 cores). Documents keep the
order of their best passage's rank.

Optionally (``ask_sentences``), each block is cut down to its sentences most similar to the question
(:func:`select_sentences`); measured on the dev set it costs far more accuracy than it saves time, so whole blocks
are the default (``eval/results/answer_table.md``).

Each document is also given the name its abstract coins (:func:`coined_name`), which the prompt shows with its
passages; the corpus's abstracts have no titles, so the model otherwise calls them "Passage [n]".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

import numpy as np

from citerag.index.search import SearchResult
from citerag.index.text import fold, split_sentences

#: Written between two kept sentences that were not next to each other.
GAP = " … "


def merge_same_document(results: list[SearchResult]) -> list[SearchResult]:
    """Group ``results`` by document (documents in order of their best rank), sort each document's passages by
    position, and merge passages that overlap or touch into one.

    A merged result spans ``start`` of the first to ``end`` of the last passage (``text`` is that slice of the
    document, so ``document.text[start:end] == passage.text`` still holds); its ``chunk_id`` joins the merged ids
    with ``+``, its retrieval ranks and scores are the best of its parts. ``rank`` is renumbered ``1..n`` in
    the new order, e.g. ``[A#2, B#0, A#1]`` with A#1 and A#2 overlapping gives ``[A#1+2, B#0]``.
    """
    by_doc: dict[str, list[SearchResult]] = {}
    for result in results:
        by_doc.setdefault(result.passage.doc_id, []).append(result)
    merged: list[SearchResult] = []
    for group in by_doc.values():
        group.sort(key=lambda r: r.passage.start)
        current = group[0]
        for result in group[1:]:
            if result.passage.start <= current.passage.end:
                current = _join(current, result)
            else:
                merged.append(current)
                current = result
        merged.append(current)
    return [result.replace(rank=rank) for rank, result in enumerate(merged, start=1)]


def select_sentences(
    question: str, texts: list[str], embed: Callable[[list[str]], np.ndarray], keep: int
) -> list[str]:
    """Each of ``texts`` cut down to its ``keep`` sentences (:func:`citerag.index.text.split_sentences`) most similar to
    ``question``, in their order in the text, with :data:`GAP` where sentences were left out; a text of at most
    ``keep`` sentences is returned whole.

    Args:
        embed: the dense encoder's ``encode``: ``list[str] -> (n, dim) float32``, rows L2-normalised, so similarity
            is the inner product (cosine). It is called once for the question and once for every sentence.
        keep: sentences kept per text, >= 1.

    Raises:
        ValueError: ``keep < 1``.

    >>> select_sentences("speed?", ["A is new. It is 40x faster. It is open."], embed, keep=1)  # doctest: +SKIP
    ['It is 40x faster.']
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    spans = [split_sentences(text) for text in texts]
    sentences = [text[start:end] for text, text_spans in zip(texts, spans, strict=True) for start, end in text_spans]
    if not sentences:
        return list(texts)
    vectors = embed([fold(question), *(fold(sentence) for sentence in sentences)])
    similarity = vectors[1:] @ vectors[0]
    out: list[str] = []
    offset = 0
    for text, text_spans in zip(texts, spans, strict=True):
        scores, offset = similarity[offset : offset + len(text_spans)], offset + len(text_spans)
        if len(text_spans) <= keep:
            out.append(text)
            continue
        kept = sorted(int(i) for i in np.argsort(-scores, kind="stable")[:keep])
        pieces = [text[slice(*text_spans[kept[0]])]]
        for previous, i in zip(kept, kept[1:]):
            pieces.append((" " if i == previous + 1 else GAP) + text[slice(*text_spans[i])])
        out.append("".join(pieces))
    return out


def _best(a: float | int | None, b: float | int | None, pick) -> float | int | None:  # noqa: ANN001
    values = [v for v in (a, b) if v is not None]
    return pick(values) if values else None


def _join(a: SearchResult, b: SearchResult) -> SearchResult:
    start, end = a.passage.start, max(a.passage.end, b.passage.end)
    passage = replace(
        a.passage,
        chunk_id=f"{a.passage.chunk_id}+{b.passage.ordinal}",
        end=end,
        text=a.document.text[start:end],
        n_tokens=a.passage.n_tokens + b.passage.n_tokens,  # an upper bound (the overlap is counted twice)
    )
    return a.replace(
        passage=passage,
        rank=min(a.rank, b.rank),
        score=max(a.score, b.score),
        bm25_rank=_best(a.bm25_rank, b.bm25_rank, min),
        dense_rank=_best(a.dense_rank, b.dense_rank, min),
        bm25_score=_best(a.bm25_score, b.bm25_score, max),
        dense_score=_best(a.dense_score, b.dense_score, max),
    )


# A coined name: a token with a capital after its first letter or a digit (EDEN, LU-KV, GP-EquiFlow, CFlower, V₁,
# XR-1), possibly hyphenated.
_NAME = r"[A-Za-z][\w]*(?:[-–][\w]+)*"
_COINED = re.compile(rf"(?<![\w-])(?=[\w-]*?[A-Za-z][\w-]*?[A-Z0-9\u2080-\u2089])({_NAME})(?![\w-])")
_INTRODUCED = re.compile(
    r"\b(?:we|this (?:paper|work)|here)\s+(?:\w+\s+){0,4}?(?:propos|introduc|present|develop|design|call|name|dub|"
    r"term|establish|construct|build|release|creat)\w*\b([^.;:]{0,120})|\b(?:called|named|dubbed|termed)\s+([^.;:]{0,60})",
    re.IGNORECASE,
)
# A capitalised word right after the introducing verb and set off as a name: "we propose Quill (", "We introduce
# Vesta, a ...".
_INTRODUCED_WORD = re.compile(r"^\s*(?:the |our |an? )?([A-Z][a-z]{2,})(?=\s*[,(:]|\s+an?\s)")
# Acronyms of the field that abstracts use without coining them.
_COMMON_ACRONYMS = frozenset(
    "LLM LLMs KV AI ML RL NLP GPU GPUs CPU CNN CNNs RNN GNN GNNs MoE CoT SOTA VLA VLM VLMs API SE SGD MLP MLPs "
    "ODE ODEs PDE PDEs MDP MDPs QA".split()
)


@lru_cache(maxsize=4096)  # asked for each passage in the prompt and again when an answer says "Passage [n]"
def coined_name(text: str) -> str | None:
    """The name an abstract coins for its method, model or benchmark, or ``None``: the first capitalised or
    numbered token (``EDEN``, ``LU-KV``, ``GP-EquiFlow``, ``V₁``) in the words after "we propose / introduce /
    present ..." or "called / named ...", skipping the field's common acronyms (``LLM``, ``KV``, ...).

    Abstracts have no titles here, so this is what a reader would call the paper; the prompt gives it with each
    passage and answers that say "Passage [n]" are rewritten with it (:func:`name_references`).

    >>> coined_name("Long contexts are costly. We propose LU-KV, a KV cache eviction method.")
    'LU-KV'
    """
    folded = fold(text)
    for match in _INTRODUCED.finditer(folded):
        span = match.group(1) or match.group(2) or ""
        # "Parameter-Masked Decoupled Optimization (PMDO)": the abbreviation in brackets is the name used later
        abbreviations = [m.group(1) for m in re.finditer(r"\(([^()\s]+)\)", span)]
        for candidate in [*abbreviations, *_COINED.findall(span)]:
            if _is_coined(candidate):
                return candidate
        if match.group(1) and (word := _INTRODUCED_WORD.match(match.group(1))):
            return word.group(1)
    return None


def names_in(text: str) -> list[str]:
    """The name-shaped tokens of ``text`` (``LU-KV``, ``EDEN``, ``GPT-4``, ``V₁`` as ``V1``), the field's common
    acronyms (``LLM``, ``KV``) left out.

    >>> names_in("LU-KV beats an LLM baseline on GPT-4 outputs.")
    ['LU-KV', 'GPT-4']
    """
    return [candidate for candidate in _COINED.findall(fold(text)) if _is_coined(candidate)]


def _is_coined(candidate: str) -> bool:
    """A name-shaped token with a part of its own: not a common acronym, nor one plus lowercase words ("LLM-free")."""
    parts = re.split(r"[-–]", candidate)
    own = [p for p in parts if p not in _COMMON_ACRONYMS and not p.islower()]
    return len(candidate) > 1 and bool(_COINED.fullmatch(candidate)) and bool(own)
