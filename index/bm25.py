"""Sparse retrieval: BM25 over passage tokens, scored by bm25s (Lù 2024), saved as ``.npy`` arrays.

Default variant: Lucene's BM25 (Robertson & Zaragoza 2009; Lucene's IDF ``log(1 + (N - df + 0.5) / (df + 0.5))``),
k1 = 1.5, b = 0.75 -- the settings bm25s reports 0.690 nDCG@10 with on BEIR SciFact.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import bm25s
import numpy as np
import scipy.sparse as sp
from bm25s import scoring
from bm25s.tokenization import Tokenized

from citerag.index.tokenize import tokenize
from citerag.index.types import BM25Method, Hit, Ranking

# bm25s sets its own logger to DEBUG on import, so every build printed "Building index from IDs" through the
# application's handlers; its warnings still show.
logging.getLogger("bm25s").setLevel(logging.WARNING)


@dataclass(frozen=True, slots=True)
class CorpusTokens:
    """The BM25 tokens of every passage, kept with the index so an update re-tokenises only new passages.

    Passage ``i``'s tokens are ``[vocab[t] for t in ids[offsets[i]:offsets[i + 1]]]``, in text order.

    Attributes:
        vocab: the distinct tokens (``list[str]``); ids index into it.
        ids: int32, shape ``(total tokens,)``.
        offsets: int64, shape ``(passages + 1,)``, non-decreasing, ``offsets[0] == 0``.
    """

    vocab: list[str]
    ids: np.ndarray
    offsets: np.ndarray

    FILES = ("tokens.ids.npy", "tokens.offsets.npy", "tokens.vocab.json")

    @property
    def size(self) -> int:
        """Number of passages."""
        return len(self.offsets) - 1

    @classmethod
    def from_tokens(cls, corpus_tokens: Sequence[Sequence[str]]) -> CorpusTokens:
        """Encode token lists (from :func:`citerag.index.tokenize.tokenize`), one per passage."""
        return cls([], np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64)).extend(corpus_tokens)

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Callable[[str], list[str]] = tokenize) -> CorpusTokens:
        """The tokens of ``texts`` (model texts, :func:`citerag.index.build.passage_texts`), each distinct text
        tokenised once: a text seen before (a repeated boilerplate passage, a document indexed twice under two ids)
        takes its tokens from the first, at the cost of a dictionary lookup instead of ~90 us of tokenising."""
        row_of: dict[str, int] = {}
        rows = np.fromiter((row_of.setdefault(text, len(row_of)) for text in texts), dtype=np.int64, count=len(texts))
        distinct = cls.from_tokens([tokenizer(text) for text in row_of])
        return distinct if len(row_of) == len(texts) else distinct._gather(rows)

    def extend(self, corpus_tokens: Sequence[Sequence[str]]) -> CorpusTokens:
        """A new table: these passages, then ``corpus_tokens`` (new terms join the vocabulary)."""
        vocab = list(self.vocab)
        lookup = {token: i for i, token in enumerate(vocab)}
        new_ids = []
        for tokens in corpus_tokens:
            for token in tokens:
                if token not in lookup:
                    lookup[token] = len(vocab)
                    vocab.append(token)
                new_ids.append(lookup[token])
        lengths = np.fromiter((len(tokens) for tokens in corpus_tokens), dtype=np.int64, count=len(corpus_tokens))
        ids = np.concatenate([np.asarray(self.ids, dtype=np.int32), np.asarray(new_ids, dtype=np.int32)])
        offsets = np.concatenate([np.asarray(self.offsets, dtype=np.int64), self.offsets[-1] + np.cumsum(lengths)])
        return CorpusTokens(vocab, ids, offsets)

    def select(self, rows: Sequence[int] | np.ndarray) -> CorpusTokens:
        """A new table of passages ``rows`` (in that order); terms no longer used leave the vocabulary.

        Raises:
            IndexError: a row outside ``0 .. size - 1``.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == self.size and np.array_equal(rows, np.arange(self.size)):
            return self  # every passage, in order (an update that only adds)
        kept = self._gather(rows)
        used, ids = np.unique(kept.ids, return_inverse=True)
        return CorpusTokens([self.vocab[i] for i in used.tolist()], ids.astype(np.int32), kept.offsets)

    def _gather(self, rows: np.ndarray) -> CorpusTokens:
        """Passages ``rows`` (int64, any order, repeats allowed) with this vocabulary, unused terms kept."""
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        # positions of the kept tokens: each row's start repeated over its length, plus 0 .. length - 1
        positions = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return CorpusTokens(self.vocab, np.asarray(self.ids)[positions], offsets)

    def lengths(self) -> np.ndarray:
        """Tokens per passage: int64, shape ``(size,)``."""
        return np.diff(np.asarray(self.offsets, dtype=np.int64))

    def save(self, directory: Path) -> None:
        """Write the three files of :attr:`FILES` under ``directory``."""
        np.save(directory / self.FILES[0], np.asarray(self.ids, dtype=np.int32))
        np.save(directory / self.FILES[1], np.asarray(self.offsets, dtype=np.int64))
        (directory / self.FILES[2]).write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> CorpusTokens | None:
        """Read a table written by :meth:`save`; ``None`` when ``directory`` has none (an index written before
        tokens were kept: an update then re-tokenises every passage)."""
        if not all((directory / name).is_file() for name in cls.FILES):
            return None
        mode: Literal["r"] | None = "r" if mmap else None
        vocab = json.loads((directory / cls.FILES[2]).read_text(encoding="utf-8"))
        return cls(vocab, np.load(directory / cls.FILES[0], mmap_mode=mode), np.load(directory / cls.FILES[1], mmap_mode=mode))


#: Passages scored per block in :class:`_TableBM25` (bounds the build's temporary arrays to a few hundred MB).
_BUILD_BLOCK_TOKENS = 1 << 23


class _TableBM25(bm25s.BM25):
    """``bm25s.BM25`` built from a :class:`CorpusTokens` table with numpy instead of bm25s's Python loop per passage.

    Overrides ``build_index_from_ids``, the step bm25s documents for building "in a different way"; ``index`` is
    given ``Tokenized(ids=<CorpusTokens>, vocab=<term -> id>)``. The score matrix is the same, value for value and
    dtype for dtype (``tests/index/test_bm25.py`` compares it with ``bm25s.BM25.index`` for every variant): the same
    average length, bm25s's own IDF, non-occurrence and term-frequency functions (``bm25s.scoring``) applied to
    arrays, float32 scores in CSC form (int32 row indices, int64 column pointers), built from arrays instead of
    Python loops (the performance page measures it); the model saves and loads as any ``bm25s.BM25``.
    """

    def build_index_from_ids(self, unique_token_ids, corpus_token_ids, show_progress=True, leave_progress=False):
        table: CorpusTokens = corpus_token_ids
        n_docs, n_vocab = table.size, len(unique_token_ids)
        lengths = table.lengths()
        avg_doc_len = lengths.mean()  # as bm25s: np.array([len(ids) ...]).mean(), a float64
        doc_idx, vocab_idx, tf = self._term_counts(table, n_vocab)
        df = np.bincount(vocab_idx, minlength=n_vocab)
        doc_frequencies = dict(enumerate(df.tolist()))
        idf_fn, tfc_fn = scoring._select_idf_scorer(self.idf_method), scoring._select_tfc_scorer(self.method)
        if self.method in self.methods_requiring_nonoccurrence:
            self.nonoccurrence_array = scoring._build_nonoccurrence_array(
                doc_frequencies=doc_frequencies, n_docs=n_docs, compute_idf_fn=idf_fn, calculate_tfc_fn=tfc_fn,
                l_d=avg_doc_len, l_avg=avg_doc_len, k1=self.k1, b=self.b, delta=self.delta, dtype=self.dtype)
        else:
            self.nonoccurrence_array = None
        idf_array = scoring._build_idf_array(doc_frequencies=doc_frequencies, n_docs=n_docs, compute_idf_fn=idf_fn,
                                             dtype=self.dtype)
        scores = np.empty(len(tf), dtype=self.dtype)
        for at in range(0, len(tf), _BUILD_BLOCK_TOKENS):  # bm25s's per-passage arithmetic, a block at a time
            part = slice(at, at + _BUILD_BLOCK_TOKENS)
            # float32 tf against float64 length terms: float64, as bm25s's scalar doc length and np.float64 average
            tfc = tfc_fn(tf_array=tf[part], l_d=lengths[doc_idx[part]], l_avg=avg_doc_len, k1=self.k1, b=self.b,
                         delta=self.delta)
            block = idf_array[vocab_idx[part]] * tfc
            if self.nonoccurrence_array is not None:
                block -= self.nonoccurrence_array[vocab_idx[part]]
            scores[part] = block
        # (passage, term) pairs in passage-major order are a CSR matrix; its CSC transpose is bm25s's layout
        doc_ptr = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(np.bincount(doc_idx, minlength=n_docs), out=doc_ptr[1:])
        matrix = sp.csr_matrix((scores, vocab_idx, doc_ptr), shape=(n_docs, n_vocab)).tocsc()
        return {"data": matrix.data.astype(self.dtype, copy=False),
                "indices": matrix.indices.astype(self.int_dtype, copy=False),
                "indptr": matrix.indptr.astype(np.int64, copy=False), "num_docs": n_docs}

    def _term_counts(self, table: CorpusTokens, n_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(passage row int64, term id int32, term frequency float32)`` of every distinct (passage, term) pair,
        sorted by passage then term."""
        ids, offsets = np.asarray(table.ids), np.asarray(table.offsets, dtype=np.int64)
        parts = []
        start = 0
        while start < table.size:  # whole passages, about _BUILD_BLOCK_TOKENS tokens a block
            end = max(int(np.searchsorted(offsets, offsets[start] + _BUILD_BLOCK_TOKENS, side="right")) - 1, start + 1)
            end = min(end, table.size)
            rows = np.repeat(np.arange(start, end, dtype=np.int64), np.diff(offsets[start:end + 1]))
            keys, counts = np.unique(rows * n_vocab + ids[offsets[start]:offsets[end]], return_counts=True)
            parts.append((keys // n_vocab, (keys % n_vocab).astype(np.int32), counts.astype(self.dtype)))
            start = end
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, self.dtype)
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))  # type: ignore[return-value]


class BM25Index:
    """A BM25 index over a fixed list of tokenised passages (row i == passage i).

    Args:
        k1: term-frequency saturation (1.2-2.0 usual).
        b: length normalisation in [0, 1].
        method: bm25s variant: ``"lucene"``, ``"robertson"``, ``"atire"``, ``"bm25l"`` or ``"bm25+"``.

    Raises:
        ValueError: a parameter out of range or an unknown method.
    """

    METHODS: tuple[BM25Method, ...] = get_args(BM25Method)

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: BM25Method = "lucene") -> None:
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b, self.method = k1, b, method
        self._model: bm25s.BM25 | None = None
        self._df: np.ndarray = np.zeros(0, dtype=np.int64)
        self.size = 0
        self.tokens: CorpusTokens | None = None  # what it was built from (None: loaded from an older index)

    def _attach(self, model: bm25s.BM25) -> None:
        self._model = model
        # bm25s keeps one CSC column per vocabulary term: its length is the term's document frequency.
        self._df = np.diff(np.asarray(model.scores["indptr"])).astype(np.int64)
        # Plain ndarray views of bm25s's arrays (still memory-mapped when loaded so, nothing copied): slicing an
        # np.memmap makes a memmap object each time, a cost paid on every query.
        scores = model.scores
        self._data, self._indices, self._indptr = (np.asarray(scores[key]) for key in ("data", "indices", "indptr"))
        self._dtype, self._int_dtype = np.dtype(model.dtype), np.dtype(model.int_dtype)

    def build(self, corpus_tokens: list[list[str]] | CorpusTokens) -> None:
        """Index passages given as token lists (from :func:`citerag.index.tokenize.tokenize`) or as a
        :class:`CorpusTokens` table, row order kept; the table is kept (:attr:`tokens`) and saved with the index."""
        tokens = corpus_tokens if isinstance(corpus_tokens, CorpusTokens) else CorpusTokens.from_tokens(corpus_tokens)
        self.tokens = tokens
        self.size = tokens.size
        if not self.size:
            self._model = None
            return
        model = _TableBM25(k1=self.k1, b=self.b, method=self.method)
        model.index(Tokenized(ids=tokens, vocab={t: i for i, t in enumerate(tokens.vocab)}), show_progress=False)
        self._attach(model)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every passage for the query: float32 array of shape ``(size,)``; 0 where no term matches.

        The same numbers as bm25s's ``BM25.get_scores`` (its accumulation, done here on the arrays directly: each
        query token's precomputed column added with ``np.add.at`` in query order, then the variant's
        non-occurrence scores).
        """
        if self._model is None:
            return np.zeros(self.size, dtype=np.float32)
        vocab = self._model.vocab_dict
        ids = [vocab[token] for token in query_tokens if token in vocab]
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        token_ids = np.asarray(ids, dtype=self._int_dtype)
        scores = np.zeros(self._model.scores["num_docs"], dtype=self._dtype)
        data, indices, indptr = self._data, self._indices, self._indptr
        for start, end in zip(indptr[token_ids].tolist(), indptr[token_ids + 1].tolist(), strict=True):
            np.add.at(scores, indices[start:end], data[start:end])
        if self._model.nonoccurrence_array is not None:  # bm25l and bm25+: what a passage lacking a term scores
            scores += self._model.nonoccurrence_array[token_ids].sum()
        return np.asarray(scores, dtype=np.float32)

    @property
    def vocabulary_size(self) -> int:
        """Distinct terms in the indexed passages (0 for an empty index)."""
        return len(self._df)

    def document_frequencies(self, tokens: Sequence[str]) -> list[int]:
        """How many passages contain each of ``tokens`` (0 for a token no passage holds, or an empty index)."""
        if self._model is None:
            return [0] * len(tokens)
        vocab = self._model.vocab_dict
        return [int(self._df[vocab[t]]) if t in vocab and vocab[t] < len(self._df) else 0 for t in tokens]

    def upper_bound(self, query_tokens: list[str]) -> float:
        """The most a passage could score for this query: the sum of the Lucene IDFs of its distinct terms,
        ``log(1 + (N - df + 0.5) / (df + 0.5))``, a term absent from the corpus counting with ``df = 0``.

        bm25s's Lucene scores omit the ``(k1 + 1)`` factor, so a term contributes at most its IDF (tf -> infinity).
        Dividing a score by this bound gives the share of the query a passage matches, in [0, 1); for the other
        variants the bound is the same normaliser, not an exact maximum. Returns 1.0 for an empty query.
        """
        if self._model is None or not query_tokens:
            return 1.0
        n = self.size
        total = 0.0
        for df in self.document_frequencies(list(set(query_tokens))):
            total += math.log(1 + (n - df + 0.5) / (df + 0.5))
        return total or 1.0

    def search(self, query_tokens: list[str], k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` passages by BM25 score; passages matching no query term are never returned.

        Args:
            query_tokens: tokens of the query (same tokenizer as the corpus).
            k: number of results wanted (fewer come back when fewer passages match).
            allowed: optional boolean mask of shape ``(size,)``; rows outside it are never returned (filters are
                applied before top-k, not after).

        Returns:
            Hits sorted by descending score, ties broken by lower row.
        """
        return self.top(query_tokens, k, allowed).hits()

    def top(self, query_tokens: list[str], k: int, allowed: np.ndarray | None = None) -> Ranking:
        """:meth:`search` as a :class:`~citerag.index.types.Ranking` (rows int64, scores float32)."""
        if self.size == 0 or k <= 0:
            return Ranking.empty()
        return _positive_top(self.scores(query_tokens), k, allowed)

    def save(self, directory: Path) -> None:
        """Write the index as bm25s's ``.npy`` + JSON files, and its :class:`CorpusTokens`, under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        if self._model is not None:
            self._model.save(str(directory), show_progress=False)
        if self.tokens is not None:
            self.tokens.save(directory)

    @classmethod
    def load(cls, directory: Path, size: int, k1: float, b: float, method: BM25Method,
             mmap: bool = True) -> BM25Index:
        """Load an index written by :meth:`save` (memory-mapped by default) for ``size`` passages."""
        index = cls(k1=k1, b=b, method=method)
        index.size = size
        if size:
            index._attach(bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False, verbosity=0))
        index.tokens = CorpusTokens.load(directory, mmap=mmap)
        return index


def top_k_hits(scores: np.ndarray, k: int, positive_only: bool = False) -> list[Hit]:
    """The ``k`` highest entries of a score vector as hits, sorted by (-score, row).

    Ties are broken by the lower row also at the ``k``-th place, so a top-``k`` is always the first ``k`` of a deeper
    top-``k``. Only candidate rows (positive, or finite) are selected among, with ``np.partition`` on their values
    rather than ``np.argpartition`` on the whole vector: with numpy 2.x, argpartition of a BM25 score vector (mostly
    tied zeros) is several times slower.

    Args:
        scores: float array of shape ``(n,)``; ``-inf`` marks excluded rows.
        k: how many to return (at most ``n``).
        positive_only: drop rows scoring ``<= 0`` (BM25: no term matched).
    """
    return top_k_ranking(scores, k, positive_only).hits()


def top_k_ranking(scores: np.ndarray, k: int, positive_only: bool = False) -> Ranking:
    """:func:`top_k_hits` as a :class:`~citerag.index.types.Ranking` (rows int64, scores of ``scores``' dtype)."""
    if scores.shape[0] == 0 or k <= 0:
        return Ranking.empty()
    rows = np.flatnonzero(scores > 0) if positive_only else np.flatnonzero(np.isfinite(scores))
    return _top_of(rows, scores[rows], k)


#: A BM25 top-k first looks at every SAMPLE_STRIDE-th passage: the k-th highest score among them is at most the k-th
#: highest of all, so only passages scoring at least that need sorting out, a few times k rows instead of every
#: passage matching a query term (60,681 passages, top 100: 168 -> 95 us; 1,031,577: 3.7 -> 0.7 ms, load 8).
SAMPLE_STRIDE = 32


def _positive_top(scores: np.ndarray, k: int, allowed: np.ndarray | None) -> Ranking:
    """The ``k`` best rows scoring > 0 (and ``allowed``, when given), as :func:`top_k_hits` with ``positive_only``
    chooses them, for finite scores (BM25's)."""
    sample = scores[::SAMPLE_STRIDE]
    if allowed is not None:
        sample = sample[allowed[::SAMPLE_STRIDE]]  # a threshold from rows outside the filter could be too high
    if sample.size >= k:
        threshold = np.partition(sample, sample.size - k)[sample.size - k]
        if threshold > 0:  # else fewer than k sampled rows match: every matching row is a candidate
            rows = np.flatnonzero(scores >= threshold)
            if allowed is not None:
                rows = rows[allowed[rows]]
            return _top_of(rows, scores[rows], k)
    rows = np.flatnonzero(scores > 0)
    if allowed is not None:  # rows outside the filter never compete for the top k
        rows = rows[allowed[rows]]
    return _top_of(rows, scores[rows], k)


def _top_of(rows: np.ndarray, values: np.ndarray, k: int) -> Ranking:
    """The ``k`` best of candidate ``rows`` scoring ``values``, sorted by (-value, row)."""
    if rows.size > k:  # keep every row scoring at least the k-th highest value (all ties at the boundary)
        kth = np.partition(values, rows.size - k)[rows.size - k]
        keep = values >= kth
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))[:k]
    return Ranking(rows[order].astype(np.int64, copy=False), values[order])
