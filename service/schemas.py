"""Request and response schemas of the HTTP API (pydantic). The CLI's ``--json`` prints these same shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from citerag.index.backend import WriteReport
from citerag.index.filters import compile_filters
from citerag.index.ids import MAX_ID_CHARS
from citerag.index.ingest import META_FIELDS, given_doc_id, make_document
from citerag.index.search import SearchResult
from citerag.index.types import Document
from citerag.service.answering import Answer
from citerag.service.answering.types import Evidence
from citerag.service.answering.names import paper_label
from citerag.service.conversation import Turn
from citerag.service.display import display

MAX_QUERY_CHARS = 2000
#: Hard limits of a request's ``history`` (the configured ones, ``CITERAG_HISTORY_MAX_TURNS`` and
#: ``CITERAG_HISTORY_MAX_CHARS``, are checked by the routes and may only be lower).
MAX_HISTORY_TURNS = 100
MAX_TURN_CHARS = 20_000


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must contain non-whitespace text")
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in value):
        raise ValueError("must not contain control characters")
    return value.strip()


def _valid_filters(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value:
        compile_filters(value)  # raises ValueError naming the bad operator
    return value or None


FILTERS_DESCRIPTION = (
    'Metadata conditions applied inside retrieval, e.g. {"venue": "icml", "year": {"gte": 2018}}; '
    "operators eq, ne, gt, gte, lt, lte, in, nin."
)


class SearchRequest(BaseModel):
    """``POST /search`` body."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS, description="Free-text query.")
    k: int = Field(10, ge=1, le=100, strict=True, description="Number of passages to return.")
    mode: Literal["hybrid", "bm25", "dense"] = Field("hybrid", description="Retriever to use.")
    one_per_doc: bool = Field(False, strict=True, description="Keep only the best passage of each document.")
    filters: dict[str, Any] | None = Field(None, description=FILTERS_DESCRIPTION)

    _check_query = field_validator("query")(_not_blank)
    _check_filters = field_validator("filters")(_valid_filters)


class HistoryTurn(BaseModel):
    """One earlier turn of a conversation in an ``/ask`` body: a user question or an assistant answer.

    Only user turns are read (their subject carries over to a follow-up, :mod:`citerag.service.conversation`); an
    assistant turn's ``doc_ids`` (the documents its answer cited) are kept as candidates; its text is never read
    nor citable.
    """

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"] = Field(description="user or assistant.")
    content: str = Field(..., min_length=1, max_length=MAX_TURN_CHARS, description="The message text.")
    doc_ids: list[Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]] = Field(
        default_factory=list, max_length=20, description="Assistant turns: the documents the answer cited."
    )

    _check_content = field_validator("content")(_not_blank)

    def to_turn(self) -> Turn:
        """The :class:`~citerag.service.conversation.Turn` this stands for."""
        return Turn(self.role, self.content, tuple(self.doc_ids))


class AskRequest(BaseModel):
    """``POST /ask`` body."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS, description="Natural-language question.")
    k: int | None = Field(
        None, ge=1, le=20, strict=True, description="Passages given to the model (default: CITERAG_ASK_K, 3)."
    )
    filters: dict[str, Any] | None = Field(None, description=FILTERS_DESCRIPTION)
    stream: bool = Field(False, strict=True, description="Send server-sent events: passages, tokens, then the checked answer.")
    history: list[HistoryTurn] = Field(
        default_factory=list, max_length=MAX_HISTORY_TURNS,
        description="Earlier turns of the conversation, oldest first: a follow-up question is made standalone "
        "from them before retrieval (question_used). At most CITERAG_HISTORY_MAX_TURNS turns and "
        "CITERAG_HISTORY_MAX_CHARS characters in all.",
    )

    _check_question = field_validator("question")(_not_blank)
    _check_filters = field_validator("filters")(_valid_filters)


class DisplayOut(BaseModel):
    """How a stored text reads (its ``text`` field is never changed: offsets point into it).

    ``map`` ties the two: each piece's ``[display_start, display_end, stored_start, stored_end]``, the stored offsets
    relative to the stored text this display belongs to (for a passage, add its ``start`` for document offsets).
    """

    text: str = Field(description="Readable Unicode: math as Unicode (80.6%, 128×, 𝒪(log N)), LaTeX escapes and "
                      "commands resolved, Markdown emphasis markers removed, whitespace collapsed.")
    html: str = Field(description="Sanitised HTML for a page: math as MathML, emphasis as <strong>/<em>/<code>, "
                      "each piece a <span data-s data-e> naming the stored characters it shows.")
    map: list[tuple[int, int, int, int]] = Field(
        description="[display_start, display_end, stored_start, stored_end] for each piece of text, in order.")

    @classmethod
    def of(cls, text: str) -> DisplayOut:
        """The display form of the stored ``text`` (:func:`citerag.service.display.display`)."""
        shown = display(text)
        return cls(text=shown.text, html=shown.html, map=list(shown.map))


class PassageOut(BaseModel):
    """A retrieved passage with its provenance. ``start``/``end`` are character offsets into the document."""

    rank: int
    doc_id: str
    chunk_id: str
    title: str = Field(description="Display label: the document's title, or its opening words when it has none.")
    text: str
    score: float
    bm25_rank: int | None
    dense_rank: int | None
    start: int
    end: int
    display: DisplayOut = Field(description="How text reads (offsets in its map are into text).")

    @classmethod
    def of(cls, result: SearchResult) -> PassageOut:
        return cls(
            rank=result.rank,
            doc_id=result.passage.doc_id,
            chunk_id=result.passage.chunk_id,
            title=result.label,
            text=result.passage.text,
            score=round(result.score, 6),
            bm25_rank=result.bm25_rank,
            dense_rank=result.dense_rank,
            start=result.passage.start,
            end=result.passage.end,
            display=DisplayOut.of(result.passage.text),
        )


class SearchResponse(BaseModel):
    query: str
    mode: str
    results: list[PassageOut]


class CitationOut(BaseModel):
    """Citation ``[n]`` of the answer: passage ``n`` of ``passages``; ``document.text[start:end] == text``."""

    n: int
    doc_id: str
    chunk_id: str
    title: str
    text: str
    start: int
    end: int
    display: DisplayOut = Field(description="How text reads (offsets in its map are into text).")


class QuoteOut(BaseModel):
    """A cited sentence exactly as stored: ``document.text[start:end] == text``."""

    start: int
    end: int
    text: str


class ReferenceOut(BaseModel):
    """One cited passage as a reference list shows it: ``[n]`` in the answer."""

    n: int = Field(description="The passage's number, as the answer's [n] markers cite it.")
    label: str = Field(description="What to call the paper: its title, or the name its abstract introduces, else its "
                       "opening words.")
    doc_id: str
    quotes: list[QuoteOut] = Field(description="The sentences of this passage the answer cites, in answer order.")


class EvidenceOut(BaseModel):
    """An evidence sentence the model read: ``document.text[start:end] == text``; ``n`` is its passage number."""

    n: int = Field(description="The passage holding the sentence: passages[n - 1].")
    doc_id: str
    start: int
    end: int
    text: str
    score: float = Field(description="Evidence score in [0, 1] (dense, BM25, rare-term coverage, passage rank).")
    used: bool = Field(description="Whether a sentence of the answer rests on this one.")
    display: DisplayOut = Field(description="How text reads (offsets in its map are into text).")

    @classmethod
    def of(cls, evidence: Evidence, used: bool = False) -> EvidenceOut:
        return cls(n=evidence.n, doc_id=evidence.doc_id, start=evidence.start, end=evidence.end, text=evidence.text,
                   score=round(evidence.score, 4), used=used, display=DisplayOut.of(evidence.text))


class AskResponse(BaseModel):
    question: str = Field(description="The question as asked.")
    question_used: str = Field(
        description="The standalone question retrieved for and answered: the question itself, or a follow-up "
        "rewritten from the conversation's history."
    )
    answer: str
    answer_display: DisplayOut = Field(description="How the answer reads (math as Unicode or MathML, [n] kept).")
    abstained: bool
    reason: str = Field(description="Why the service abstained; empty when it answered.")
    decision: Literal["yes", "no", "maybe"] | None = Field(
        None, description="For a yes/no question: the decision the answer opens with; null otherwise."
    )
    citations: list[CitationOut]
    evidence: list[EvidenceOut] = Field(
        default_factory=list, description="The evidence sentences the model wrote the answer from, in the order it "
        "read them.",
    )
    passages: list[PassageOut]
    references: list[ReferenceOut] = Field(
        default_factory=list, description="One per cited passage, in the order the answer first cites them: the "
        "paper's label, its document id and the cited sentences as stored.",
    )
    markdown: str = Field("", description="The answer with its numbered references as Markdown (what the page's "
                          "'Copy with references' copies and `citerag ask --format markdown` prints).")
    timings_ms: dict[str, float] = Field(
        description="Per stage (analyse, retrieve, evidence, judge, write, verify, compose), the model's prompt "
        "evaluation and generation (prompt, generate), and total, in milliseconds."
    )

    @classmethod
    def of(cls, answer: Answer) -> AskResponse:
        """The response for ``answer``, its references and their Markdown included."""
        from citerag.service.export import markdown

        references: dict[int, ReferenceOut] = {}
        for c in answer.citations:
            document = c.result.document
            reference = references.setdefault(c.n, ReferenceOut(
                n=c.n, label=paper_label(document) or document.label, doc_id=document.doc_id, quotes=[]))
            reference.quotes.append(QuoteOut(start=c.start, end=c.end, text=document.text[c.start : c.end]))
        response = cls(
            question=answer.asked or answer.question,
            question_used=answer.question,
            answer=answer.answer,
            answer_display=DisplayOut.of(answer.answer),
            abstained=answer.abstained,
            reason=answer.reason,
            citations=[
                CitationOut(
                    n=c.n,
                    doc_id=c.result.passage.doc_id,
                    chunk_id=c.result.passage.chunk_id,
                    title=c.result.document.label,
                    text=c.result.document.text[c.start : c.end],
                    start=c.start,
                    end=c.end,
                    display=DisplayOut.of(c.result.document.text[c.start : c.end]),
                )
                for c in answer.citations
            ],
            decision=answer.decision,
            evidence=[EvidenceOut.of(e, i in answer.used) for i, e in enumerate(answer.evidence)],
            passages=[PassageOut.of(p) for p in answer.passages],
            references=list(references.values()),
            timings_ms={key: round(value, 1) for key, value in answer.timings_ms.items()},
        )
        response.markdown = markdown(response)
        return response


class DocumentSummary(BaseModel):
    doc_id: str
    title: str = Field(description="The source's title; empty when it has none.")
    label: str = Field(description="Display label: the title, or the opening words of the text.")
    meta: dict[str, Any]

    @classmethod
    def of(cls, doc: Document) -> DocumentSummary:
        return cls(doc_id=doc.doc_id, title=doc.title, label=doc.label, meta=doc.meta)


class DocumentOut(DocumentSummary):
    text: str
    display: DisplayOut = Field(description="How text reads (offsets in its map are document offsets).")
    passages: list[dict[str, Any]] = Field(description="chunk_id, ordinal, start, end of each passage.")

    @classmethod
    def with_text(cls, doc: Document, passages: list[dict[str, Any]]) -> DocumentOut:
        """The full document: its summary, text, display form and passage spans."""
        return cls(**DocumentSummary.of(doc).model_dump(), text=doc.text, display=DisplayOut.of(doc.text),
                   passages=passages)


class DocumentsPage(BaseModel):
    total: int
    offset: int
    limit: int
    documents: list[DocumentSummary]


class DiskCondition(BaseModel):
    """A place where a write failed for space (or quota) and none has succeeded since."""

    part: str = Field(description="What was written: index, embedding cache, paper-state cache or backup.")
    path: str = Field(description="The directory written to.")
    filesystem: str = Field(description="The mount point of the file system holding it.")
    free_bytes: int = Field(description="Bytes free on that file system now (-1: unknown).")
    quota: bool = Field(description="The disk quota, not the device, ran out.")
    since: str = Field(description="When a write there first failed (ISO 8601, UTC).")
    failures: int = Field(description="Writes there that failed since.")
    detail: str = Field(description="The first failure's message: what to free.")


class DiskHealth(BaseModel):
    status: Literal["ok", "full"] = Field(
        "ok", description="full: a write (index, embedding cache, paper-state cache) failed for space and none has "
        "succeeded there since. Searches and answers go on from the live version; index writes answer 507 until "
        "space is freed, the caches are skipped.")
    part: str | None = Field(None, description="The oldest condition's part (when full).")
    path: str | None = Field(None, description="The oldest condition's directory (when full).")
    filesystem: str | None = Field(None, description="The oldest condition's file system (when full).")
    free_bytes: int | None = Field(None, description="Bytes free there now (when full).")
    since: str | None = Field(None, description="When the oldest condition began (when full).")
    detail: str | None = Field(None, description="What to free (when full).")
    conditions: list[DiskCondition] = Field(default_factory=list, description="Every place reported full.")


class Health(BaseModel):
    status: Literal["ok"]
    documents: int
    passages: int
    index_version: str
    generator_loaded: bool = Field(description="The answering model is loaded (it loads in the background at "
                                   "start; /ask waits for it, /search does not need it).")
    generator: Literal["loading", "ready", "failed"] = Field(
        description="The answering model's state; when failed, /ask answers 503 naming the cause.")
    index_check: Literal["pending", "verifying", "verified", "failed", "not-applicable"] = Field(
        "not-applicable", description="The full check of the live index version's files (sha256 of each, in the "
        "background after start; the start checked sizes and mtimes as written). failed: the version is refused "
        "(503) until the recovered one is served. not-applicable: the Milvus backend.")
    papers: Literal["loading", "not started", "reading", "done", "failed", "off"] = Field(
        "off", description="Reading the corpus's papers whole ahead of questions (a small corpus: a question about "
        "one paper is then answered from its saved prompt state): not started (read_papers_ahead off), reading, "
        "done, failed (see the log), or off (a large corpus, or whole_paper_documents = 0); loading while the model "
        "loads. A question asked while reading is answered the same way, only slower.")
    decoding: dict[str, Any] = Field(
        default_factory=dict, description="The answering model's decoding once it is loaded: `speculative` (none, "
        "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod or draft) and its sizes; with `fallback` (why) and "
        "`requested` when the configured one failed to load and plain decoding runs instead. Empty while loading.")
    disk: DiskHealth = Field(default_factory=DiskHealth, description="Whether writes fail for lack of space.")


MAX_DOCUMENT_CHARS = 200_000
MAX_DOCUMENTS_PER_REQUEST = 1000


class DocumentIn(BaseModel):
    """One document in a ``POST /documents`` body: ``text`` is required; ``id`` defaults to a hash of the text."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(
        None, max_length=MAX_ID_CHARS,
        description="Stable id; replaces a document with it. An integer is taken as its decimal string and an empty "
        "id as none, as in JSONL files.",
    )
    title: str = Field("", max_length=1000)
    text: str = Field(..., min_length=1, max_length=MAX_DOCUMENT_CHARS, description="The abstract (any Unicode).")
    venue: str | None = Field(None, max_length=200)
    year: int | None = Field(None, ge=1000, le=9999, strict=True)
    url: str | None = Field(None, max_length=2000)
    authors: list[str] | None = Field(None, max_length=500)

    _check_text = field_validator("text")(_not_blank)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_in_sources(cls, value: Any) -> str | None:
        """The same rule as a JSONL file's id (:func:`citerag.index.ingest.given_doc_id`, :mod:`citerag.index.ids`): ``7`` -> ``"7"``."""
        return given_doc_id(value)

    @field_validator("title", "venue", "url")
    @classmethod
    def _no_control_characters(cls, value: str | None) -> str | None:
        if value is not None and any(ord(ch) < 32 for ch in value):
            raise ValueError("must not contain control characters")
        return value

    def to_document(self) -> Document:
        """The :class:`~citerag.index.types.Document` to index (``meta.source`` is ``"api"``)."""
        meta = {key: getattr(self, key) for key in META_FIELDS if getattr(self, key) not in (None, "", [])}
        return make_document(self.text, self.title, self.id, {**meta, "source": "api"})


class WriteReportOut(BaseModel):
    """What a ``POST`` or ``DELETE /documents`` changed (see :class:`citerag.index.backend.WriteReport`)."""

    added: list[str]
    replaced: list[str]
    updated: list[str]
    unchanged: list[str]
    deleted: list[str]
    skipped: list[dict[str, str]]
    passages_embedded: int = Field(description="Passages sent to the encoder by this write.")
    version: str = Field(description="The live index version after the write.")

    @classmethod
    def of(cls, report: WriteReport) -> WriteReportOut:
        return cls(
            added=report.added, replaced=report.replaced, updated=report.updated, unchanged=report.unchanged,
            deleted=report.deleted, skipped=[{"doc_id": i, "reason": r} for i, r in report.skipped],
            passages_embedded=report.passages_embedded, version=report.version,
        )


class BackupRequest(BaseModel):
    """The body of ``POST /admin/backup``."""

    model_config = ConfigDict(extra="forbid")

    dest: str = Field(..., min_length=1, max_length=4096, description="A directory on the server that does not "
                      "exist yet, as an absolute path; the backup is written beside it and renamed into place.")

    @field_validator("dest")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if any(ord(ch) < 32 for ch in value):
            raise ValueError("must not contain control characters")
        if not value.startswith("/"):
            raise ValueError("must be an absolute path on the server")
        return value


class BackupOut(BaseModel):
    """What ``POST /admin/backup`` wrote (see :class:`citerag.index.backup.BackupReport`)."""

    dest: str = Field(description="The backup directory.")
    version: str = Field(description="The index version backed up (live when the backup began).")
    wal_seq: int = Field(description="The last write-log entry that version holds.")
    wal_last: int = Field(description="The last entry of the backed-up log (entries past wal_seq are replayed after "
                          "a restore).")
    documents: int
    passages: int
    files: int = Field(description="Files listed, with their sha256, in the backup's BACKUP.json.")
    bytes: int
    created_at: str
