"""Split documents into passages sized in the embedding model's own word pieces.

Passages are built from whole sentences (:func:`citerag.index.text.split_sentences`) packed up to ``target_tokens``, with
the last sentences of one passage repeated at the start of the next (up to ``overlap_tokens``). A sentence longer
than the hard limit is cut at word boundaries. The hard limit is the model's ``max_seq_length`` including the
``[CLS]``/``[SEP]`` special tokens and the title prefix, and every passage is re-measured after packing, so no
passage is ever truncated by the encoder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from citerag.index.text import fold, split_sentences
from citerag.index.types import Document, Passage

if TYPE_CHECKING:  # transformers (and torch) are not imported to chunk: the ONNX embedder's tokenizer is enough
    from transformers import PreTrainedTokenizerBase

    from citerag.index.embed_onnx import FastTokenizer

_WORD = re.compile(r"\S+")


def model_text(text: str, title: str = "") -> str:
    """The form of a passage that is embedded and BM25-tokenised: ``"{title}. {folded text}"`` (title optional)."""
    body = fold(text)
    return f"{fold(title)}. {body}" if title else body


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int
    n_tokens: int


class Chunker:
    """Sentence-aware, token-sized passage splitter.

    Args:
        tokenizer: the embedding model's tokenizer (``SentenceTransformer.tokenizer`` or the ONNX embedder's
            :class:`~citerag.index.embed_onnx.FastTokenizer`).
        max_seq_length: the encoder's limit in word pieces, special tokens included (256 for all-MiniLM-L6-v2).
        target_tokens: preferred passage length in word pieces (packing stops before exceeding it).
        overlap_tokens: at most this many word pieces of trailing sentences are repeated in the next passage.

    Raises:
        ValueError: ``target_tokens`` not in ``[16, max_seq_length]`` or ``overlap_tokens`` not in
            ``[0, target_tokens / 2]``.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase | FastTokenizer,
        max_seq_length: int = 256,
        target_tokens: int = 128,
        overlap_tokens: int = 64,
    ) -> None:
        if not 16 <= target_tokens <= max_seq_length:
            raise ValueError(f"target_tokens must be in [16, {max_seq_length}], got {target_tokens}")
        if not 0 <= overlap_tokens <= target_tokens // 2:
            raise ValueError(f"overlap_tokens must be in [0, {target_tokens // 2}], got {overlap_tokens}")
        self.tokenizer = tokenizer
        # A private copy of the fast tokenizer for counting: the encoder's calls set truncation on the shared one
        # (a count must never be truncated), and ``encode_batch_fast`` (no offsets) counts about twice as fast.
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._counter = Tokenizer.from_str(backend.to_str()) if backend is not None else None
        if self._counter is not None:
            self._counter.no_truncation()
            self._counter.no_padding()
        self.max_seq_length = max_seq_length
        self.target_tokens = target_tokens
        self.overlap_tokens = overlap_tokens
        self._n_special = len(tokenizer("")["input_ids"])

    def count(self, texts: list[str]) -> list[int]:
        """Word-piece counts of ``texts`` without special tokens (list of int, same length)."""
        if not texts:
            return []
        if self._counter is not None:
            return [len(encoding.ids) for encoding in self._counter.encode_batch_fast(texts, add_special_tokens=False)]
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)  # counting only: no truncation warning
        return [len(ids) for ids in encoded["input_ids"]]

    def chunk(self, doc: Document) -> list[Passage]:
        """Passages of ``doc`` in order; ``passage.text == doc.text[passage.start:passage.end]``.

        Every passage's ``n_tokens`` (its :func:`model_text` with title, special tokens included) is
        ``<= max_seq_length``. A document with no non-space text gives ``[]``.

        The tokenizer runs twice a document, on all sentences and on all packed passages at once: the packing is
        first planned with the sentences' summed counts,
        then each planned passage is measured exactly; only a passage whose joined form measures over the limit
        (the joined form can tokenise differently from its sentences) is shrunk by further single measurements.
        """
        prefix = [f"{fold(doc.title)}. "] if doc.title else []
        spans = split_sentences(doc.text)
        counts = self.count([*prefix, *(fold(doc.text[s:e]) for s, e in spans)])
        title_cost = counts[0] if doc.title else 0
        budget = self.max_seq_length - self._n_special - title_cost
        if budget < 8:
            raise ValueError(f"title of {doc.doc_id!r} leaves no room for text ({title_cost} tokens)")
        units = self._units(doc.text, spans, counts[len(prefix) :], budget)

        def joined(i: int, j: int) -> str:
            return model_text(doc.text[units[i].start : units[j - 1].end], doc.title)

        planned = self._pack(units, budget, lambda i, j: title_cost + sum(u.n_tokens for u in units[i:j]))
        exact = dict(zip(planned, self.count([joined(i, j) for i, j in planned]), strict=True))

        def measured(i: int, j: int) -> int:
            if (i, j) not in exact:
                exact[i, j] = self.count([joined(i, j)])[0]
            return exact[i, j]

        return [
            Passage(
                chunk_id=f"{doc.doc_id}#{ordinal}",
                doc_id=doc.doc_id,
                ordinal=ordinal,
                start=units[i].start,
                end=units[j - 1].end,
                text=doc.text[units[i].start : units[j - 1].end],
                n_tokens=measured(i, j) + self._n_special,
            )
            for ordinal, (i, j) in enumerate(self._pack(units, budget, measured))
        ]

    def _pack(self, units: list[_Unit], budget: int, measure: Callable[[int, int], int]) -> list[tuple[int, int]]:
        """Pack ``units`` into passages ``units[i:j]``: sentences added while their summed counts stay within
        ``min(target_tokens, budget)``, then dropped from the end while ``measure(i, j)`` (word pieces of the joined
        passage, title included, special tokens not) exceeds the model's limit; the next passage starts with the
        trailing units of up to ``overlap_tokens``."""
        packed: list[tuple[int, int]] = []
        i = 0
        while i < len(units):
            j = i + 1
            size = units[i].n_tokens
            while j < len(units) and size + units[j].n_tokens <= min(self.target_tokens, budget):
                size += units[j].n_tokens
                j += 1
            while j - 1 > i and measure(i, j) + self._n_special > self.max_seq_length:
                j -= 1
            packed.append((i, j))
            if j >= len(units):
                break
            back, overlap = j, 0
            while back - 1 > i and overlap + units[back - 1].n_tokens <= self.overlap_tokens:
                back -= 1
                overlap += units[back].n_tokens
            i = back
        return packed

    def _units(self, text: str, spans: list[tuple[int, int]], counts: list[int], budget: int) -> list[_Unit]:
        """Sentences (``spans`` with their word-piece ``counts``) as units; a sentence over ``budget`` word pieces
        is cut into word-boundary pieces."""
        units: list[_Unit] = []
        for (start, end), n_tokens in zip(spans, counts, strict=True):
            if n_tokens <= budget:
                units.append(_Unit(start, end, n_tokens))
            else:
                units.extend(self._split_long(text, start, end, budget))
        return units

    def _split_long(self, text: str, start: int, end: int, budget: int) -> list[_Unit]:
        words = [(m.start() + start, m.end() + start) for m in _WORD.finditer(text[start:end])]
        word_counts = self.count([fold(text[s:e]) or text[s:e] for s, e in words])
        pieces: list[_Unit] = []
        piece_start, size = words[0][0], 0
        last_end = words[0][1]
        for (w_start, w_end), n in zip(words, word_counts, strict=True):
            n = max(n, 1)
            if size and size + n > budget // 2:  # half the budget leaves room for re-measurement drift
                pieces.append(_Unit(piece_start, last_end, size))
                piece_start, size = w_start, 0
            if n > budget // 2:  # a single "word" longer than the budget (e.g. a long URL): cut by characters
                step = max(1, (w_end - w_start) * (budget // 2) // n)
                for s in range(w_start, w_end, step):
                    pieces.append(_Unit(s, min(s + step, w_end), budget // 2))
                piece_start, size, last_end = w_end, 0, w_end
                continue
            size += n
            last_end = w_end
        if size:
            pieces.append(_Unit(piece_start, last_end, size))
        return pieces
