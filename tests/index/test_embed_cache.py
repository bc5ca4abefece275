"""The persistent embedding cache, over a counting stand-in embedder (the cache is the subject, not the model)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from citerag.index.build import build_index
from citerag.index.chunking import Chunker
from citerag.index.embed_cache import CachedEmbedder, cache_key
from citerag.index.ingest import load_documents
from citerag.index.store import IndexConfig, IndexStore
from tests.conftest import SEEDS, CountingEmbedder, HashEmbedder

TEXTS = ["kv cache eviction", "sparse attention for long context", "diffusion models for proteins"]


def shards(root: Path, model: str = "hash-embedder") -> list[Path]:
    return sorted((root / model).glob("*.npy"))


class TestCachedEmbedder:
    def test_a_second_process_reads_bit_identical_vectors_and_embeds_nothing(self, tmp_path: Path) -> None:
        first_encoder = CountingEmbedder()
        with CachedEmbedder(first_encoder, tmp_path) as cached:
            first = cached.encode(TEXTS)
        assert first_encoder.embedded == 3 and len(shards(tmp_path)) == 1

        again = CountingEmbedder()
        with CachedEmbedder(again, tmp_path) as cached:
            second = cached.encode(list(reversed(TEXTS)))
        assert again.embedded == 0 and (cached.hits, cached.misses) == (3, 0)
        assert second.dtype == np.float32 and second.shape == (3, 32)
        assert second.tobytes() == first[::-1].tobytes()  # bit-identical, in the order asked
        assert len(shards(tmp_path)) == 1  # nothing new to write

    def test_duplicates_in_one_call_are_embedded_once(self, tmp_path: Path) -> None:
        inner = CountingEmbedder()
        with CachedEmbedder(inner, tmp_path) as cached:
            out = cached.encode([TEXTS[0], TEXTS[1], TEXTS[0], TEXTS[0]])
        assert inner.calls == [[TEXTS[0], TEXTS[1]]]
        assert (cached.hits, cached.misses) == (2, 2)
        assert out[0].tobytes() == out[2].tobytes() == out[3].tobytes()
        np.testing.assert_array_equal(out[:2], HashEmbedder().encode(TEXTS[:2]))

    def test_only_misses_are_embedded_and_a_texts_vector_is_reused_within_the_process(self, tmp_path: Path) -> None:
        inner = CountingEmbedder()
        with CachedEmbedder(inner, tmp_path, flush_rows=1000) as cached:
            cached.encode(TEXTS[:2])
            cached.encode(TEXTS)  # pending, not yet written: still a hit
        assert inner.calls == [TEXTS[:2], [TEXTS[2]]]
        assert len(shards(tmp_path)) == 1  # written once, at close

    def test_pending_vectors_are_written_every_flush_rows(self, tmp_path: Path) -> None:
        cached = CachedEmbedder(CountingEmbedder(), tmp_path, flush_rows=2)
        cached.encode(TEXTS[:1])
        assert shards(tmp_path) == []
        cached.encode(TEXTS[1:])
        assert len(shards(tmp_path)) == 1
        assert cached.encode(TEXTS).tobytes() == HashEmbedder().encode(TEXTS).tobytes()  # read back memory-mapped

    def test_models_do_not_share_vectors(self, tmp_path: Path) -> None:
        with CachedEmbedder(CountingEmbedder(), tmp_path) as cached:
            cached.encode(TEXTS)
        other = CountingEmbedder()
        other.name = "hash-embedder+other-backend"
        with CachedEmbedder(other, tmp_path) as cached:
            cached.encode(TEXTS)
        assert other.embedded == 3
        assert cache_key("a", "b") != cache_key("a+onnx-int8", "b")
        assert [p.name for p in sorted(tmp_path.iterdir())] == ["hash-embedder", "hash-embedder+other-backend"]

    def test_two_writers_share_one_directory(self, tmp_path: Path) -> None:
        a, b = CachedEmbedder(CountingEmbedder(), tmp_path), CachedEmbedder(CountingEmbedder(), tmp_path)
        a.encode(TEXTS[:1])
        b.encode(TEXTS)  # b loaded the (empty) cache before a wrote: embeds all three
        a.close()
        b.close()
        reader = CountingEmbedder()
        with CachedEmbedder(reader, tmp_path) as cached:
            cached.encode(TEXTS)
        assert reader.embedded == 0 and len(shards(tmp_path)) == 2

    @pytest.mark.parametrize("damage", ["truncate", "flip", "rename"])
    def test_a_damaged_shard_is_skipped_with_a_warning(self, tmp_path: Path, caplog, damage: str) -> None:
        with CachedEmbedder(CountingEmbedder(), tmp_path) as cached:
            cached.encode(TEXTS[:2])
        with CachedEmbedder(CountingEmbedder(), tmp_path) as cached:
            cached.encode(TEXTS[2:])
        damaged = shards(tmp_path)[0]
        data = damaged.read_bytes()
        if damage == "truncate":
            damaged.write_bytes(data[: len(data) // 2])
        elif damage == "flip":
            damaged.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
        else:  # a file that is not a shard at all, under a valid-looking name
            damaged.write_bytes(b"not numpy")
        inner = CountingEmbedder()
        with caplog.at_level(logging.WARNING, logger="citerag.index.embed_cache"):
            with CachedEmbedder(inner, tmp_path) as cached:
                out = cached.encode(TEXTS)
        assert f"ignoring shard {damaged}" in caplog.text
        assert "does not match its name" in caplog.text
        assert 1 <= inner.embedded <= 2  # the damaged shard's texts, embedded again
        np.testing.assert_array_equal(out, HashEmbedder().encode(TEXTS))

    def test_empty_input(self, tmp_path: Path) -> None:
        with CachedEmbedder(CountingEmbedder(), tmp_path) as cached:
            out = cached.encode([])
        assert out.shape == (0, 32) and out.dtype == np.float32
        assert not (tmp_path / "hash-embedder").exists()


def test_a_second_build_of_the_same_corpus_embeds_nothing(tokenizer, tmp_path: Path) -> None:
    documents = load_documents([SEEDS])
    chunker = Chunker(tokenizer, 256, 128, 64)
    config = IndexConfig("hash-embedder", 32, 256, 128, 64)
    built = []
    for run in range(2):
        inner = CountingEmbedder()
        store = IndexStore(tmp_path / f"idx{run}")
        with CachedEmbedder(inner, tmp_path / "cache") as cached:
            build_index(documents, store, cached, chunker, config, show_progress=False)
        built.append((inner.embedded, store.load()))
    (first_count, first), (second_count, second) = built
    assert first_count == len(first.passages) > 38
    assert second_count == 0
    np.testing.assert_array_equal(second.dense.vectors(), first.dense.vectors())
