"""The read-paper step: a question about one paper of a small corpus is judged and answered over that paper read
whole, from a prompt state saved once per paper (cache-augmented generation: Chan et al. 2024, "Don't Do RAG:
When Cache-Augmented Generation is All You Need for Knowledge Tasks").

Every judge and writer prompt over the same evidence starts the same way
(:func:`~citerag.service.answering.prompts.evidence_prefix`: the fixed messages, then the evidence). When the
evidence is a whole paper, its sentences numbered in the paper's order, that start is the same for every question
about the paper: llama.cpp reads it once and saves the slot's state (a slot file, ~20 MB for ~750 tokens at f16:
:meth:`~citerag.service.generator.Generator.read_and_save`); a later question restores it (~5 ms) and reads only
its question and the request (~40-60 tokens, ~0.9 s on 2 cores, against ~2.4 s for the ~170 tokens of the chosen
sentences). A paper not read yet is read on the spot (~3.6 s) and saved, so an answer is the same whether or not
its paper was read before; only the time differs. ``citerag serve`` reads the corpus's papers in the background
at start (:meth:`ReadPaper.read_all`).

A yes/no question's own conversation (:func:`~citerag.service.answering.prompts.conclusion_prefix`: its system
prompt, then the evidence) is read and saved the same way, in its own slot (:data:`YES_NO`; ~10 MB a state). Over a
larger corpus a yes/no question's paper is read whole too, on the spot, for a second, silent reading of its decision
(:meth:`ReadPaper.second_reading`; :class:`~citerag.service.answering.write.Write`).

When: a fact, number, definition or yes/no question (not about several papers), over a corpus of at most
``max_documents`` documents, whose best evidence sentence's paper is abstract-sized
(:data:`~citerag.service.answering.retrieve.WHOLE_DOCUMENT_CHARS`) and was read whole by the retrieve step. The
chosen evidence has been shown (the ``evidence`` event) and still decides the judge's close-evidence rule; the whole
paper is then sent as the evidence (a second ``evidence`` event, before any answer text), as the judge's second
look sends what it reads; the model's P(yes) over a whole paper has its own bar (:data:`MIN_CONFIDENCE_WHOLE`).

Measured on the shipped dev set (``eval/results/qa.md``, seventeenth round; ``eval/probes/whole_abstract.py``):
over single-paper questions the written answer holds the expected string as often as over the chosen sentences
(dev half 22 of 29 each at their bars, held-out test half 22 of 28 each); which-papers questions lose (one paper
is read), so they keep the chosen sentences, and read each candidate paper whole only for a second judgement
(:meth:`ReadPaper.read_document`). Over the 26 yes/no questions of the shipped question sets (eighteenth round;
``eval/probes/yes_no_whole.py``) the decision over the paper read whole is right as often as over the chosen
sentences (20 of 26 each: odd-numbered 11 = 11, even 9 = 9), and the write step's median time falls from 3.5 s
to 1.9 s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.answering.evidence import Evidence, sentence_spans
from citerag.service.answering.prompts import ANSWER_SLOT, DECISION_SLOT, conclusion_prefix, evidence_prefix
from citerag.service.answering.retrieve import WHOLE_DOCUMENT_CHARS
from citerag.service.answering.state import AnswerState
from citerag.service.generator import STATE_SIZE_SUFFIX, Generator

log = logging.getLogger(__name__)

#: Papers are read whole over a corpus of at most this many documents: each paper's saved states are ~30 MB (the
#: answer conversation's ~20 MB, the yes/no one's ~10 MB; 64 papers: ~1.9 GB in the cache directory) and reading
#: them takes ~5.5 s a paper on 2 cores.
MAX_DOCUMENTS = 64


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation a paper is read into: its start over some evidence (the prompt's part that every question
    over that evidence shares), the llama.cpp slot it runs in and how many leading messages that slot keeps pinned
    (``None``: the generator's ``fixed_messages``)."""

    name: str
    prefix: Callable[[Sequence[Evidence]], list[dict[str, str]]]
    slot: int
    fixed: int | None


#: The answer conversation (the judge and the writer: :func:`~citerag.service.answering.prompts.evidence_prefix`).
ANSWER = Conversation("answer", evidence_prefix, ANSWER_SLOT, None)
#: The yes/no conversation (the conclusion and the decision: :func:`~citerag.service.answering.prompts.
#: conclusion_prefix`), ~330 fewer tokens a state (no worked examples).
YES_NO = Conversation("yes/no", conclusion_prefix, DECISION_SLOT, 1)
#: The conversations a paper is read into.
CONVERSATIONS = (ANSWER, YES_NO)
#: The question kinds answered from a paper read whole (about one paper), and the conversation each is read into.
KINDS = {"fact": ANSWER, "number": ANSWER, "definition": ANSWER, "yes_no": YES_NO}
#: Below this P(yes) over a paper read whole the service abstains. The model says yes less readily to a whole
#: abstract than to three chosen sentences (median P(yes) of answerable dev questions 0.87 against 0.89, the dev
#: half's q023 0.82 -> 0.57); on the shipped dev half 0.5 keeps as many right answers (22 of 29) and no-answer
#: abstentions (6 of 7, the judge alone) as 0.65 over the chosen sentences; 0.55 loses two (eval/results/qa.md).
MIN_CONFIDENCE_WHOLE = 0.5


def paper_evidence(document: Document, results: Sequence[tuple[int, SearchResult]]) -> list[Evidence] | None:
    """Every evidence sentence of ``document`` (:func:`~citerag.service.answering.evidence.sentence_spans`), in its
    order, each held by the result of ``results`` (``(passage number, result)`` of this document) that overlaps it
    most; scores 0. ``None`` when a sentence lies outside every result (the paper was not read whole)."""
    whole: list[Evidence] = []
    for start, end in sentence_spans(document.text):
        overlap, n, result = max(((min(end, r.passage.end) - max(start, r.passage.start), n, r) for n, r in results),
                                 default=(0, 0, None), key=lambda t: t[0])
        if result is None or overlap <= 0:
            return None
        whole.append(Evidence(n, result, start, end, document.text[start:end], 0.0, 0.0))
    return whole or None


def stored_paper_evidence(document: Document, passages: Sequence[Passage]) -> list[Evidence] | None:
    """:func:`paper_evidence` of ``document`` over its stored ``passages`` (a backend's ``passages_of``: all of them,
    numbered ``1..n``), as :meth:`ReadPaper.read_all` reads it ahead: the same evidence, so the same saved state."""
    return paper_evidence(document, [(n, SearchResult(n, passage, document, 0.0, None, None))
                                     for n, passage in enumerate(passages, start=1)])


class ReadPaper:
    """Replace the chosen evidence of a question about one paper with that paper read whole, its prompt state
    restored or read and saved (module docstring).

    Args:
        generator: the loaded chat model; papers are read whole only when it has a ``state_dir``.
        searcher: what retrieved the passages; its ``count()`` (documents) decides ``max_documents``.
        max_documents: the largest corpus whose papers are read whole (0: never).
        keep_states: how many paper states the state directory keeps, the most recently used (default twice
            ``max_documents`` a conversation: 256 states, ~4 GB at most).
    """

    name = "read_paper"

    def __init__(self, generator: Generator, searcher: object, max_documents: int = MAX_DOCUMENTS,
                 keep_states: int | None = None) -> None:
        if max_documents < 0:
            raise ValueError(f"max_documents must be >= 0, got {max_documents}")
        self.generator = generator
        self.searcher = searcher
        self.max_documents = max_documents
        self.keep_states = 2 * len(CONVERSATIONS) * max_documents if keep_states is None else keep_states
        self._ahead = "not started"
        #: The states llama.cpp could not read or save in this process (a full disk): their papers are answered from
        #: the chosen sentences without trying again (each try costs a paper's reading, ~3.6 s).
        self._failed: set[str] = set()

    @property
    def ahead(self) -> str:
        """The papers read ahead (:meth:`read_all`): ``"off"`` (not :attr:`enabled`), ``"not started"``,
        ``"reading"``, ``"done"`` or ``"failed"``."""
        return self._ahead if self.enabled else "off"

    @property
    def enabled(self) -> bool:
        """Whether this corpus's papers are read whole: states can be saved and the corpus is small enough."""
        documents = self._documents()
        return documents is not None and documents <= self.max_documents

    def _large_corpus(self) -> bool:
        """Whether papers can be read whole but this corpus's are not read whole up front: more than
        ``max_documents`` documents."""
        documents = self._documents()
        return documents is not None and documents > self.max_documents

    def _documents(self) -> int | None:
        """The corpus's document count (the searcher's ``count()``) when papers can be read whole at all (the
        generator has a ``state_dir``, ``max_documents`` is above 0); ``None`` otherwise or when it cannot count."""
        count = getattr(self.searcher, "count", None)
        if getattr(self.generator, "state_dir", None) is None or self.max_documents == 0 or not callable(count):
            return None
        return count()

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        info = state.info
        conversation = KINDS.get(info.kind)
        if (conversation is None or info.several_papers or state.papers_judged or not state.evidence
                or not self.enabled):
            return
        whole = self._best_paper(state, conversation)
        if whole is None:
            return
        state.evidence = [self._scored(item, state.evidence) for item in whole]
        state.read_whole = True
        state.emit("evidence", state.evidence)  # what the answer is now written from, before any of it

    def second_reading(self, state: AnswerState) -> list[Evidence] | None:
        """A yes/no question's paper read whole for a second, silent reading of its decision
        (:class:`~citerag.service.answering.write.Write`), over a corpus whose papers are not read whole up front
        (more than ``max_documents`` documents): every sentence of the best evidence sentence's paper, in its order,
        with :data:`YES_NO`'s slot holding their conversation's start (:meth:`ready`: restored, or read on the spot,
        ~3.6 s for an abstract on 2 cores, and saved; pruned as every state is). ``None`` when the question is not
        a yes/no question about one paper, its paper is already read whole (a small corpus: :meth:`run`), papers are
        never read whole (no ``state_dir``, ``max_documents`` 0), the paper is longer than an abstract or was not
        retrieved whole, or its state could not be read or saved.

        Measured (eval/results/qa.md, twentieth round): over PubMedQA dev100 the decision over the chosen sentences
        and the one over the paper read whole are each right on 62 and their mean probabilities on 66 (as built,
        64); held out (test100) 61 -> 67.
        """
        assert state.info is not None
        if (state.info.kind != "yes_no" or state.info.several_papers or state.papers_judged or not state.evidence
                or state.read_whole or not self._large_corpus()):
            return None
        return self._best_paper(state, YES_NO)

    def _best_paper(self, state: AnswerState, conversation: Conversation) -> list[Evidence] | None:
        """The best evidence sentence's paper read whole (:func:`paper_evidence` over its retrieved passages), with
        ``conversation``'s slot ready (:meth:`_ready_once`); ``None`` when it is longer than an abstract, was not
        retrieved whole, or its state could not be read or saved."""
        document = max(state.evidence, key=lambda e: e.score).result.document
        if len(document.text) > WHOLE_DOCUMENT_CHARS:
            return None
        whole = paper_evidence(document, [(n, r) for n, r in enumerate(state.passages, start=1)
                                          if r.document.doc_id == document.doc_id])
        return whole if whole is not None and self._ready_once(whole, document.doc_id, conversation) else None

    def read_document(self, document: Document) -> list[Evidence] | None:
        """``document`` read whole, for a which-papers question's second judgement of a candidate paper
        (:class:`~citerag.service.answering.judge.JudgePapers`): its sentences as evidence, in its order, with the
        slot holding their prompt's start (:meth:`ready`: restored, or read and saved). ``None`` when papers are
        not read whole (not :attr:`enabled`), the document is longer than an abstract, the searcher cannot list a
        document's passages (``passages_of``: a backend's), or its state could not be read or saved (then not
        tried again in this process)."""
        passages_of = getattr(self.searcher, "passages_of", None)
        if not self.enabled or passages_of is None or len(document.text) > WHOLE_DOCUMENT_CHARS:
            return None
        whole = stored_paper_evidence(document, passages_of(document.doc_id))
        return whole if whole is not None and self._ready_once(whole, document.doc_id, ANSWER) else None

    def _ready_once(self, whole: Sequence[Evidence], doc_id: str, conversation: Conversation) -> bool:
        """:meth:`ready` ``whole`` in ``conversation``; ``False`` when its state failed to be read or saved, now or
        before in this process (a full disk: each try costs a paper's reading, ~3.6 s, so it is not tried again until
        the service restarts; the question is then judged and answered from the chosen sentences, as before)."""
        name = self.state_name(whole, conversation)
        if name in self._failed:
            return False
        try:
            self.ready(whole, name, conversation)
        except RuntimeError:
            self._failed.add(name)
            log.warning("reading paper %s whole failed; answering from the chosen sentences (not tried again until "
                        "the service restarts)", doc_id, exc_info=True)
            return False
        return True

    @staticmethod
    def _scored(item: Evidence, chosen: Sequence[Evidence]) -> Evidence:
        """``item`` with the score and dense similarity of the chosen sentence it overlaps (the best), if any."""
        overlapping = [e for e in chosen if e.doc_id == item.doc_id and e.start < item.end and item.start < e.end]
        if not overlapping:
            return item
        best = max(overlapping, key=lambda e: e.score)
        return replace(item, score=best.score, dense=best.dense)

    def state_name(self, whole: Sequence[Evidence], conversation: Conversation = ANSWER) -> str:
        """The saved state's file name: a digest of the generator's ``state_identity`` (model, llama.cpp, KV cache
        type) and the prompt's start in ``conversation`` (:func:`~citerag.service.answering.prompts.evidence_prefix`
        for :data:`ANSWER`)."""
        key = [self.generator.state_identity, conversation.prefix(whole)]
        return f"paper-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:40]}.bin"

    def ready(self, whole: Sequence[Evidence], name: str | None = None, conversation: Conversation = ANSWER) -> None:
        """Leave ``conversation``'s slot holding its prompt's start over ``whole`` (its state ``name``, default
        :meth:`state_name`): restored when saved before, else read and saved. A state that cannot be restored (a
        damaged file) is read and saved again. Another question may take the slot before this one's judge and
        writer do (model calls run one at a time, questions do not): the prompt is then read in full, slower, and
        llama.cpp's batched arithmetic may differ in its last bits.

        Raises:
            RuntimeError: llama.cpp could not read or save it.
        """
        name = name or self.state_name(whole, conversation)
        if self.generator.has_state(name) and self.generator.restore_state(name, conversation.slot):
            self._touch(name)
            return
        self._read(whole, name, conversation)

    def _read(self, whole: Sequence[Evidence], name: str, conversation: Conversation) -> None:
        """Read and save the state ``name`` of ``whole`` in ``conversation``, then prune the state directory
        (:meth:`_prune`).

        Raises:
            RuntimeError: llama.cpp could not read or save it.
        """
        self.generator.read_and_save(conversation.prefix(whole), name, conversation.slot, conversation.fixed)
        self._prune()

    def _touch(self, name: str) -> None:
        """Mark the state ``name`` as just used (its file's modification time), so pruning keeps it."""
        try:
            os.utime(self.generator.state_dir / name)  # type: ignore[operator]
        except (OSError, TypeError):
            pass

    def _prune(self) -> None:
        """Keep only the :attr:`keep_states` most recently used paper states in the state directory: a cache (a
        pruned paper is read again when asked about), so states of papers no longer indexed, of other corpora or
        of an earlier model do not pile up (~21 MB each)."""
        directory = getattr(self.generator, "state_dir", None)
        if directory is None:
            return

        def used(path: Path) -> float:
            try:
                return path.stat().st_mtime
            except OSError:
                return 0.0

        directory = Path(directory)
        for stale in sorted(directory.glob("paper-*.bin"), key=used, reverse=True)[self.keep_states:]:
            stale.unlink(missing_ok=True)
        for record in directory.glob(f"paper-*.bin{STATE_SIZE_SUFFIX}"):  # records of states no longer kept
            if not record.with_name(record.name.removesuffix(STATE_SIZE_SUFFIX)).exists():
                record.unlink(missing_ok=True)

    def read_all(self, backend: object) -> int:
        """Read and save every abstract-sized paper of ``backend`` (its ``documents()`` and ``passages_of()``) in each
        of :data:`CONVERSATIONS`, where not saved yet, when :attr:`enabled`; returns how many states were read. For
        ``citerag serve``'s start, in a background thread: each state holds the model for ~2-3.6 s, so a question
        asked meanwhile waits at most that long."""
        if not self.enabled:
            return 0
        self._ahead = "reading"
        try:
            read = self._read_all(backend)
        except Exception:
            self._ahead = "failed"
            log.exception("reading the papers ahead stopped; a question about a paper not read reads it")
            raise
        self._ahead = "done"
        return read

    def _read_all(self, backend: object) -> int:
        read = 0
        offset = 0
        while documents := backend.documents(offset, 100):  # type: ignore[attr-defined]
            offset += len(documents)
            for document in documents:
                if len(document.text) > WHOLE_DOCUMENT_CHARS:
                    continue
                passages = backend.passages_of(document.doc_id)  # type: ignore[attr-defined]
                whole = stored_paper_evidence(document, passages)
                for conversation in CONVERSATIONS if whole is not None else ():
                    name = self.state_name(whole, conversation)
                    if name in self._failed or self.generator.has_state(name):
                        continue
                    try:
                        self._read(whole, name, conversation)
                    except RuntimeError:
                        self._failed.add(name)
                        log.warning("reading paper %s ahead (%s) failed; it is answered from the chosen sentences",
                                    document.doc_id, conversation.name, exc_info=True)
                        continue
                    read += 1
        return read
