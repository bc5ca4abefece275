"""One settings object, read from ``CITERAG_*`` environment variables (and a ``.env`` file if present)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from citerag.index.types import BM25Method, DenseSetting, FusionMethod
from citerag.service.generator import Speculative

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EmbeddingBackend = Literal["torch", "onnx-int8"]
# Chosen by measurement (eval/results/embedding_backends.md): SciFact nDCG@10 of the default hybrid 0.7318 vs torch's
# 0.7322 (the rule: at most 0.005 lower), and about twice the passages/s.
DEFAULT_EMBEDDING_BACKEND: EmbeddingBackend = "onnx-int8"


class Settings(BaseSettings):
    """Effective configuration of the service, CLI and evaluation.

    Sources, strongest first: arguments, ``CITERAG_<FIELD>`` environment variables, ``.env``, an optional
    ``citerag.toml`` in the working directory (``field = value`` lines, no prefix), then the defaults below.
    The README lists every field.
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
        description="all-MiniLM-L6-v2 on torch (float32) or onnx-int8 (onnxruntime, int8 weights; see "
        "eval/results/embedding_backends.md). An index is searched only with the backend that built it.",
    )
    embedding_cache: bool = Field(
        True, description="Reuse passage embeddings from cache_dir/embeddings when re-indexing (keyed by text + model)."
    )

    # Chunking, in the embedding model's word pieces.
    chunk_tokens: int = Field(128, ge=16, le=256, description="Target passage length (word pieces).")
    chunk_overlap: int = Field(64, ge=0, le=128, description="Max overlap between passages (word pieces).")

    # Retrieval.
    bm25_k1: float = Field(1.5, ge=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    bm25_method: BM25Method = "lucene"
    candidates: int = Field(100, ge=1, le=1000, description="Top-N from each retriever before fusion.")
    fusion: FusionMethod = Field(
        "bounded",
        description="Hybrid fusion: bounded (default, see eval/results/scifact.md), rrf or weighted. The Milvus "
        "backend cannot run bounded: it falls back to rrf, with a warning and stats()['fusion_fallback'].",
    )
    dense_index: DenseSetting = Field(
        "auto",
        description="FAISS index: flat (exact), hnsw or ivf-sq8 (approximate; ivf-sq8 stores 8-bit codes, ~392 B a "
        "passage), or auto: flat below 50,000 passages, hnsw below 200,000, ivf-sq8 from there.",
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
    generator: Literal["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"] = "qwen2.5-coder-1.5b"
    generator_path: Path | None = Field(None, description="A GGUF file to use instead of the packaged generator.")
    ask_k: int = Field(
        8, ge=1, le=20, description="Passages retrieved per question by default (evidence is chosen from their "
        "sentences; chosen in eval/results/qa.md).",
    )
    evidence_sentences: int = Field(
        3, ge=1, le=9, description="Evidence sentences the model writes from, for a question about one paper (within "
        "700 characters; which-papers and comparison questions add each qualifying paper's best; eval/results/qa.md).",
    )
    min_confidence: float = Field(
        0.65, ge=0.0, le=1.0, description="Abstain when the model's probability that the evidence answers the "
        "question is below this; a yes/no question's \"yes\" needs the same probability (chosen on dev questions: "
        "eval/results/qa.md).",
    )
    min_confidence_unseen: float = Field(
        0.85, ge=0.0, le=1.0, description="The confidence a question (not a yes/no one) needs when one of its content "
        "words is in no indexed passage (0: off; chosen on dev questions: eval/results/qa.md).",
    )
    close_cosine: float = Field(
        0.60, ge=0.0, le=1.0, description="An evidence sentence at least this close to the question (cosine "
        "similarity) answers it whatever the model's confidence (1: off; chosen on dev questions: eval/results/qa.md).",
    )
    second_look: bool = Field(
        True, description="Before abstaining, judge the next-best evidence sentences in place of the first ones "
        "(eval/results/qa.md).",
    )
    judge_papers: bool = Field(
        True, description="Judge each candidate paper of a which-papers question with the model "
        "(eval/results/qa.md); off: name the papers whose best sentence scores half the best one's.",
    )
    whole_paper_documents: int = Field(
        64, ge=0, description="Over a corpus of at most this many documents, a question about one paper is answered "
        "over that paper read whole, from prompt states saved once per paper in cache_dir/paper-states (~30 MB "
        "a paper; `citerag serve` reads them at start): ~1.5 s faster per answer. Over a larger corpus a yes/no "
        "question's paper is read whole for a second reading of its decision (an estimated 4-5 s more). 0: never "
        "read whole (eval/results/qa.md).",
    )
    read_papers_ahead: bool = Field(
        True, description="`citerag serve` reads the corpus's papers whole in the background once the model is "
        "loaded (whole_paper_documents), so that the first question about each paper is as fast as the next.",
    )
    n_ctx: int = Field(4096, ge=512, description="Model context window (tokens).")
    max_answer_tokens: int = Field(120, ge=16, le=2048, description="The written answer's limit (tokens).")
    threads: int = Field(0, ge=0, description="CPU threads for generation; 0 = all cores.")
    # Decoding (issue 28; bench/generator_speed.py, bench/RESULTS.md). Greedy output is the plain decoder's (up to
    # the last bits of batched arithmetic); a variant that fails to load falls back to plain decoding with a warning.
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
        "verified by the repacked batch kernels, whose sums differ in the last bits (bench/RESULTS.md, issue 28).",
    )
    speculative_draft_min: int = Field(
        1, ge=0, le=64, description="Speculative decoding: the shortest draft worth verifying (ngram-mod, draft)."
    )
    speculative_min_hits: int = Field(1, ge=1, le=64, description="Speculative decoding: ngram-map-k4v's min hits.")
    speculative_p_min: float = Field(
        0.6, ge=0.0, le=1.0, description="Speculative decoding, draft: the draft model stops below this probability."
    )
    max_queue: int = Field(8, ge=1, description="Questions admitted at once; more get 503 + Retry-After.")
    min_dense_score: float = Field(
        0.18, description="Abstain when the best passage's cosine similarity to the question is below this."
    )

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
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)

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
