"""One settings object, read from ``CITERAG_*`` environment variables (and a ``.env`` file if present)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args, get_origin

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from citerag.index.embed_cache import DEFAULT_MAX_MB
from citerag.index.priority import BACKGROUND_NICE
from citerag.service.generator import PROMPT_CACHE_MB
from citerag.index.store import KEEP_VERSIONS, MIN_KEEP_VERSIONS
from citerag.index.types import BM25Method, DenseSetting, FusionMethod
from citerag.service.answering.config import AnswerConfig
from citerag.service.generator import Speculative

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EmbeddingBackend = Literal["torch", "onnx-int8"]
# Chosen by measurement (the documentation's retrieval page): the same retrieval quality as torch, within the rule
# of at most 0.005 nDCG@10 lower on SciFact, at about twice the passages/s.
DEFAULT_EMBEDDING_BACKEND: EmbeddingBackend = "onnx-int8"
#: Answering's defaults live in :class:`~citerag.service.answering.config.AnswerConfig`; the settings take theirs.
_ANSWER = AnswerConfig()


class Settings(BaseSettings):
    """Effective configuration of the service, CLI and evaluation.

    Sources, strongest first: arguments, ``CITERAG_<FIELD>`` environment variables, ``.env``, an optional
    ``citerag.toml`` in the working directory (``field = value`` lines, no prefix), then the defaults below.
    The documentation's configuration page lists every field (:func:`settings_reference`).
    """

    model_config = SettingsConfigDict(env_prefix="CITERAG_", env_file=".env", extra="ignore", toml_file="citerag.toml")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, dotenv_settings, TomlConfigSettingsSource(settings_cls), file_secret_settings

    index_dir: Path = Field(Path(".citerag"), description="Index directory (versions + manifest).")
    corpus: list[Path] = Field(
        [PROJECT_ROOT / "data" / "icml2026"], description="Files/directories indexed by `serve` when no index exists."
    )
    cache_dir: Path = Field(
        Path.home() / ".cache" / "citerag", description="Assembled model files and the passage embedding cache."
    )

    # Embedding.
    embedding_backend: EmbeddingBackend = Field(
        DEFAULT_EMBEDDING_BACKEND,
        description="all-MiniLM-L6-v2 on torch (float32) or onnx-int8 (onnxruntime, int8 weights). An index is "
        "searched only with the backend that built it.",
    )
    embedding_cache: bool = Field(
        True, description="Reuse passage embeddings from cache_dir/embeddings when re-indexing (keyed by text + model)."
    )
    embedding_cache_mb: int = Field(
        DEFAULT_MAX_MB, ge=1, description="Bound of the embedding cache in cache_dir/embeddings, every model's shards "
        "together (MB; least recently used shards go first, each time a build writes one; ~1.5 kB a passage: the "
        "22,981 ML abstracts take 95 MB a backend).",
    )

    # Chunking, in the embedding model's word pieces.
    chunk_tokens: int = Field(128, ge=16, le=256, description="Target passage length (word pieces).")
    chunk_overlap: int = Field(64, ge=0, le=128, description="Max overlap between passages (word pieces).")

    # Retrieval.
    bm25_k1: float = Field(1.5, ge=0, description="BM25 term-frequency saturation k1 (Robertson & Zaragoza 2009).")
    bm25_b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation b.")
    bm25_method: BM25Method = Field("lucene", description="BM25 variant (bm25s's methods; Milvus scores as lucene).")
    candidates: int = Field(100, ge=1, le=1000, description="Top-N from each retriever before fusion.")
    fusion: FusionMethod = Field(
        "bounded",
        description="Hybrid fusion: bounded (default; the docs' retrieval page says why), rrf or weighted. The Milvus "
        "backend cannot run bounded: it falls back to rrf, with a warning and stats()['fusion_fallback'].",
    )
    dense_index: DenseSetting = Field(
        "auto",
        description="FAISS index: flat (exact), hnsw or ivf-sq8 (approximate; ivf-sq8 stores 8-bit codes, ~392 B a "
        "passage), or auto: flat below 50,000 passages, hnsw below 200,000, ivf-sq8 from there.",
    )
    keep_versions: int = Field(
        KEEP_VERSIONS, ge=MIN_KEEP_VERSIONS, description="Index versions kept on disk, the live one included; older "
        "ones are removed after each write. At least 2: the write log is cut only up to what the oldest kept version "
        "holds, so either of two kept versions plus the log restores every acknowledged write.",
    )
    verify_in_background: bool = Field(
        True, description="After start, hash every index file in full in the background (the start itself checks each "
        "file's size and mtime as written); a version that fails is refused and recovered. Off: only the start check "
        "and `citerag doctor --verify`.",
    )
    rrf_k: int = Field(60, ge=0, description="RRF constant (Cormack et al. 2009).")
    weight_bm25: float = Field(0.5, ge=0, description="BM25 weight for bounded and weighted fusion.")
    weight_dense: float = Field(0.5, ge=0, description="Dense weight for bounded and weighted fusion.")

    # Retrieval backend (see the README, "Scaling out with Milvus").
    backend: Literal["embedded", "milvus"] = Field(
        "embedded", description="embedded (FAISS + bm25s files in index_dir) or milvus (pymilvus: Lite or a server)."
    )
    milvus_uri: str | None = Field(
        None, description="Milvus Lite file (*.db) or server URL (http://host:19530); default <index_dir>/milvus.db."
    )
    milvus_token: SecretStr = Field(SecretStr(""), description="Milvus server token (user:password or API key).")
    milvus_analyzer: Literal["citerag", "milvus"] = Field(
        "citerag", description="What Milvus BM25 analyses: citerag's stemmed tokens or raw text (Milvus's analyzer)."
    )

    # Answering.
    generator: Literal["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"] = Field(
        "qwen2.5-coder-1.5b", description="The packaged generator (GGUF from PyPI packages; the 0.5B needs the "
        "small-model extra).")
    generator_path: Path | None = Field(None, description="A GGUF file to use instead of the packaged generator.")
    ask_k: int = Field(
        _ANSWER.k, ge=1, le=20, description="Passages retrieved per question by default; the papers read are the best "
        "retrieved ones.",
    )
    min_confidence: float = Field(
        _ANSWER.min_confidence, ge=0.0, le=1.0, description="Abstain when the model's probability that the papers read answer the "
        "question is below this; a yes/no question's \"yes\" needs the same probability.",
    )
    min_confidence_unseen: float = Field(
        _ANSWER.min_confidence_unseen, ge=0.0, le=1.0, description="The probability a question needs when one of its content words is in no "
        "indexed passage (a corpus of 10,000 distinct terms or more).",
    )
    read_tokens: int = Field(
        _ANSWER.read_tokens, ge=100, le=3000, description="The per-question reading budget (model tokens, ~4 characters each): a "
        "document longer than an abstract is read as its retrieved passages within it; a second paper is read only "
        "within it.",
    )
    state_cache_mb: int = Field(
        _ANSWER.state_cache_bytes // 1024**2, ge=0, description="Bound of the paper-state cache in cache_dir/paper-states (MB; least recently used "
        "states go first; ~8 MB an abstract). 0: no states are kept, every paper is read on each question.",
    )
    whole_paper_documents: int = Field(
        _ANSWER.read_ahead_documents, ge=0, description="Papers are read into the state cache when the service starts, for corpora of at most "
        "this many documents; beyond it, each paper on its first question.",
    )
    read_papers_ahead: bool = Field(
        True, description="`citerag serve` reads the corpus's papers into the state cache in the background once the "
        "model is loaded (whole_paper_documents), so that the first question about each paper is as fast as the next.",
    )
    n_ctx: int = Field(4096, ge=512, description="Model context window (tokens).")
    max_answer_tokens: int = Field(_ANSWER.answer_tokens, ge=16, le=2048, description="The written answer's limit (tokens).")
    threads: int = Field(0, ge=0, description="CPU threads for generation; 0 = all cores.")
    prompt_cache_mb: int = Field(
        PROMPT_CACHE_MB, ge=0, description="Memory llama.cpp keeps earlier prompts' states in (MiB; its own default "
        "is 8192, which grows a long-running service by gigabytes); 0: none. The papers' states have their own disk "
        "cache (CITERAG_STATE_CACHE_MB).",
    )
    background_nice: int = Field(
        BACKGROUND_NICE, ge=0, le=19, description="Nice increment of the threads that generate answers, read papers "
        "and commit index writes (Linux): under load, searches are served first; an idle machine still gives them "
        "every core. 0: all threads at the service's priority.",
    )
    # Decoding (bench/generator_speed.py). Greedy output is the plain decoder's (up to the last bits of batched
    # arithmetic); a variant that fails to load falls back to plain decoding with a warning.
    speculative: Speculative = Field(
        "ngram-map-k4v", description="Speculative decoding: none; ngram-simple / ngram-map-k / ngram-map-k4v / "
        "ngram-mod: the draft is what followed an earlier occurrence of the last tokens (in the prompt's evidence "
        "or the answer so far; ngram-map-k4v, the default, drafts a continuation only as long as the last one "
        "accepted after the same tokens); draft: the packaged Qwen2.5-Coder-0.5B (the small-model extra) drafts.",
    )
    speculative_ngram: int = Field(2, ge=1, le=64, description="Speculative decoding: the n-gram looked up (tokens).")
    speculative_draft_max: int = Field(
        2, ge=1, le=64, description="Speculative decoding: the longest draft (tokens). At most 2 keeps a verification "
        "batch (<= 3 tokens) on llama.cpp's one-token kernels, so the text is the plain decoder's; longer drafts are "
        "verified by the repacked batch kernels, whose sums differ in the last bits (docs: Performance).",
    )
    speculative_draft_min: int = Field(
        1, ge=0, le=64, description="Speculative decoding: the shortest draft worth verifying (ngram-mod, draft)."
    )
    speculative_min_hits: int = Field(1, ge=1, le=64, description="Speculative decoding: ngram-map-k4v's min hits.")
    speculative_p_min: float = Field(
        0.6, ge=0.0, le=1.0, description="Speculative decoding, draft: the draft model stops below this probability."
    )
    max_queue: int = Field(8, ge=1, description="Questions admitted at once; more get 503 + Retry-After.")

    # Conversations.
    history_max_turns: int = Field(
        20, ge=0, le=100, description="Earlier turns an /ask request's history may hold (more is 422); the "
        "OpenAI-compatible endpoint keeps the latest this many.",
    )
    history_max_chars: int = Field(
        16_000, ge=0, le=2_000_000, description="Characters an /ask request's history may hold in all (more is "
        "422); the OpenAI-compatible endpoint keeps the latest turns that fit.",
    )

    # HTTP.
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest accepted request body (bytes); more is 413.")
    cors_origins: list[str] = Field([], description="Origins allowed by CORS; empty (default) = CORS off.")
    api_key: SecretStr | None = Field(
        None,
        description="Bearer key for the write endpoints (POST/DELETE /documents). Unset: writes are allowed only "
        "when the service listens on a loopback address.",
    )
    host: str = Field("127.0.0.1", description="Address `citerag serve` binds (127.0.0.1: this machine only).")
    port: int = Field(8000, ge=1, le=65535, description="Port `citerag serve` listens on.")

    @model_validator(mode="after")
    def _overlap_fits(self) -> Settings:
        if self.chunk_overlap > self.chunk_tokens // 2:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be at most half of chunk_tokens ({self.chunk_tokens})"
            )
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests override with ``app.dependency_overrides`` or a fresh ``Settings``)."""
    return Settings()


def _type_name(annotation: object) -> str:
    """A field's type as the reference shows it: ``int``, ``list[Path]``, ``a / b`` for a fixed set of values."""
    if get_origin(annotation) is Literal:
        return " / ".join(map(str, get_args(annotation)))
    if get_origin(annotation) is not None:
        return str(annotation).replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    return getattr(annotation, "__name__", str(annotation))


def settings_reference() -> str:
    """Every setting as a Markdown table (variable, type, default, description), in declaration order: the
    documentation's configuration page holds exactly this (``make docs`` writes it; a test compares them)."""
    home = str(Path.home())
    rows = ["| variable | type | default | description |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        if isinstance(default, SecretStr):
            default = "(secret)" if default.get_secret_value() else ""
        elif isinstance(default, list):
            default = ", ".join(map(str, default)) or "[]"
        text = str(default).replace(home, "~").replace(str(PROJECT_ROOT), "<repository>")
        kind = _type_name(field.annotation)
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `CITERAG_{name.upper()}` | `{kind}` | `{text}` | {description} |".replace("``", "(none)"))
    return "\n".join(rows) + "\n"
