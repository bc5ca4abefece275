from __future__ import annotations

import pytest

from citerag.index.chunking import Chunker, model_text
from citerag.index.ingest import load_documents
from citerag.index.types import Document
from tests.conftest import SEEDS


@pytest.fixture(scope="module")
def chunker(tokenizer) -> Chunker:
    return Chunker(tokenizer, max_seq_length=256, target_tokens=128, overlap_tokens=64)


def _doc(text: str, title: str = "") -> Document:
    return Document(doc_id="d", title=title, text=text, label="d")


class TestSeedPassages:
    def test_no_passage_exceeds_the_model_limit_and_offsets_are_exact(self, chunker: Chunker, tokenizer) -> None:
        for doc in load_documents([SEEDS]):
            passages = chunker.chunk(doc)
            assert passages, doc.doc_id
            assert passages[0].start == 0 and passages[-1].end == len(doc.text)
            for i, p in enumerate(passages):
                assert p.text == doc.text[p.start : p.end]
                assert (p.ordinal, p.chunk_id, p.doc_id) == (i, f"{doc.doc_id}#{i}", doc.doc_id)
                measured = len(tokenizer(model_text(p.text, doc.title))["input_ids"])
                assert measured == p.n_tokens <= 256
            # consecutive passages leave no gap (overlap or adjacency)
            for a, b in zip(passages, passages[1:]):
                assert b.start <= a.end + 1

    def test_passages_overlap_by_whole_sentences(self, chunker: Chunker) -> None:
        docs = load_documents([SEEDS])
        overlapping = sum(b.start < a.end for d in docs for a, b in zip(chunker.chunk(d), chunker.chunk(d)[1:]))
        assert overlapping > 10


class TestEdgeCases:
    def test_empty_document_gives_no_passage(self, chunker: Chunker) -> None:
        assert chunker.chunk(_doc("   \n ")) == []

    def test_a_sentence_longer_than_the_limit_is_cut_at_word_boundaries(self, chunker: Chunker) -> None:
        text = "word " * 600 + "end."
        passages = chunker.chunk(_doc(text))
        assert len(passages) > 2
        assert all(p.n_tokens <= 256 for p in passages)
        assert all(text[p.start - 1] == " " for p in passages[1:])

    def test_a_long_unbroken_token_is_cut_too(self, chunker: Chunker) -> None:
        passages = chunker.chunk(_doc("https://example.org/" + "x9" * 800))
        assert passages and all(p.n_tokens <= 256 for p in passages)

    def test_title_counts_against_the_limit(self, chunker: Chunker) -> None:
        passages = chunker.chunk(_doc("word " * 400, title="A long title " * 10))
        assert all(p.n_tokens <= 256 for p in passages)

    def test_counts_are_never_truncated_by_the_encoders_calls(self, chunker: Chunker, tokenizer) -> None:
        # the encoder tokenises with truncation on the same tokenizer object, from other threads
        tokenizer(["word " * 400], truncation=True, max_length=16)
        assert chunker.count(["word " * 400]) == [400]
        assert chunker.count(["GP-EquiFlow, V₁ and $\\mathcal{O}(n)$"]) == [
            len(tokenizer("GP-EquiFlow, V₁ and $\\mathcal{O}(n)$", add_special_tokens=False)["input_ids"])
        ]

    def test_settings_are_validated(self, tokenizer) -> None:
        with pytest.raises(ValueError, match="target_tokens must be in"):
            Chunker(tokenizer, 256, target_tokens=300)
        with pytest.raises(ValueError, match="overlap_tokens must be in"):
            Chunker(tokenizer, 256, target_tokens=100, overlap_tokens=80)
