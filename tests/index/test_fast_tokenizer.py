"""The ONNX embedder's :class:`~citerag.index.embed_onnx.FastTokenizer` (the ``tokenizers`` library alone) against
transformers' ``AutoTokenizer`` over the same ``tokenizer.json``: the same ids, masks and chunk sizes."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.index.chunking import Chunker
from citerag.index.embed_onnx import FastTokenizer
from citerag.index.ingest import load_documents
from citerag.service.model_files import embedding_model_dir
from tests.conftest import SEEDS

TEXTS = [
    "EDEN: a KV cache eviction method for long-context language models.",
    "GP-EquiFlow, V₁ and $\\mathcal{O}(n)$ — naïve 检索增强 Ἀθῆναι",
    "",
    "word " * 400,  # longer than any max_length below
    "The BRCA1 variant was not found in healthy controls (p < 0.05).",
]


@pytest.fixture(scope="module")
def fast() -> FastTokenizer:
    return FastTokenizer(embedding_model_dir() / "tokenizer.json")


@pytest.mark.parametrize("max_length", [16, 256])
def test_padded_truncated_batches_match_transformers(fast, tokenizer, max_length) -> None:
    got = fast(TEXTS, padding=True, truncation=True, max_length=max_length, return_tensors="np")
    want = tokenizer(TEXTS, padding=True, truncation=True, max_length=max_length, return_tensors="np")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert got[key].dtype == np.int64
        np.testing.assert_array_equal(got[key], want[key].astype(np.int64), err_msg=key)
    assert got["input_ids"].shape == (5, max_length)
    assert got["input_ids"][0, 0] == 101 and got["input_ids"][2].tolist()[:3] == [101, 102, 0]  # [CLS] [SEP] [PAD]


def test_unpadded_lists_match_transformers(fast, tokenizer) -> None:
    assert fast(TEXTS, add_special_tokens=False)["input_ids"] == tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert fast("")["input_ids"] == tokenizer("")["input_ids"] == [101, 102]


def test_a_truncating_call_never_truncates_a_later_count(fast) -> None:
    fast(["word " * 400], truncation=True, max_length=16)
    assert len(fast("word " * 400, add_special_tokens=False)["input_ids"]) == 400


def test_chunks_are_the_same_with_either_tokenizer(fast, tokenizer) -> None:
    documents = load_documents([SEEDS])
    ours, theirs = Chunker(fast, 256, 128, 64), Chunker(tokenizer, 256, 128, 64)
    assert [ours.chunk(d) for d in documents] == [theirs.chunk(d) for d in documents]


def test_bad_arguments_are_refused(fast, tmp_path) -> None:
    with pytest.raises(ValueError, match="return_tensors"):
        fast(TEXTS, padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match="padding=True"):
        fast(TEXTS, return_tensors="np")
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        FastTokenizer(tmp_path / "tokenizer.json")
