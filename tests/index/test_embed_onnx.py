"""The int8 ONNX backend of all-MiniLM-L6-v2 against the torch model it is made from (real models)."""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pytest

from citerag.index.build import passage_texts
from citerag.index.chunking import Chunker
from citerag.index.ingest import load_documents
from citerag.index.retrieve import Retriever
from citerag.service.model_files import onnx_int8_model
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, load_embedder
from tests.conftest import EDEN, SEEDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def onnx_settings(settings_factory, tmp_path_factory):
    """Settings for the onnx-int8 backend; the model is exported once into a temporary cache directory."""
    return settings_factory(
        embedding_backend="onnx-int8", cache_dir=tmp_path_factory.mktemp("cache"), corpus=[SEEDS], embedding_cache=True
    )


@pytest.fixture(scope="session")
def seed_passages(tokenizer) -> list[str]:
    documents = load_documents([SEEDS])
    chunker = Chunker(tokenizer, 256, 128, 64)
    return passage_texts([p for d in documents for p in chunker.chunk(d)], {d.doc_id: d for d in documents})


class TestOnnxEmbedder:
    def test_vectors_agree_with_the_torch_model(self, onnx_settings, settings_factory, seed_passages) -> None:
        onnx = load_embedder(onnx_settings)
        torch = load_embedder(settings_factory(embedding_backend="torch"))
        assert (onnx.name, onnx.dim, onnx.max_seq_length) == ("all-MiniLM-L6-v2+onnx-int8", 384, 256)
        got, want = onnx.encode(seed_passages), torch.encode(seed_passages)
        assert got.dtype == np.float32 and got.shape == (len(seed_passages), 384)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        cosine = (got * want).sum(axis=1)
        # measured on these passages: min 0.989, mean 0.994 (int8 rounding; a float32 export gives 1.000)
        assert cosine.min() > 0.98 and cosine.mean() > 0.99

    def test_a_texts_vector_does_not_depend_on_the_other_texts(self, onnx_settings, seed_passages) -> None:
        onnx = load_embedder(onnx_settings)
        together = onnx.encode(seed_passages[:20])
        alone = np.stack([onnx.encode([text])[0] for text in seed_passages[:5]])
        assert together[:5].tobytes() == alone.tobytes()  # batch_size 1: activations quantized per text
        assert onnx.encode([]).shape == (0, 384)

    def test_the_export_is_made_once(self, onnx_settings) -> None:
        path = onnx_int8_model(onnx_settings.cache_dir)
        made = path.stat().st_mtime_ns
        assert onnx_int8_model(onnx_settings.cache_dir) == path and path.stat().st_mtime_ns == made
        stamp = json.loads(path.with_suffix(".json").read_text())
        # residual add + layer norm stays unfused (onnxruntime's fused kernel was 5x slower); attention is fused
        assert "SkipLayerNormalization" not in stamp["fusions"] and stamp["fusions"]["Attention"] == 6
        assert stamp["probe_min_cosine"] >= 0.97

    def test_another_install_of_the_same_weights_reuses_the_export(self, onnx_settings) -> None:
        path = onnx_int8_model(onnx_settings.cache_dir)
        made = path.stat().st_mtime_ns
        stamp = path.with_suffix(".json")
        record = json.loads(stamp.read_text())
        # as another virtual environment would find it: other path and time, same content
        stamp.write_text(json.dumps({**record, "source": "/elsewhere/.venv/model.safetensors", "mtime": 1}))
        assert onnx_int8_model(onnx_settings.cache_dir) == path and path.stat().st_mtime_ns == made


def test_an_onnx_index_records_its_backend_and_is_not_searched_with_torch_vectors(
    onnx_settings, settings_factory
) -> None:
    index = ensure_index(index_setup(onnx_settings), show_progress=False)
    assert index.config.embedding_model == "all-MiniLM-L6-v2+onnx-int8"
    retriever = Retriever(index, load_embedder(onnx_settings))
    top = retriever.search("How many parameters does the largest metagenomic foundation model have?", k=3)
    assert top[0].passage.doc_id == EDEN and top[0].dense_rank == 1
    with pytest.raises(ValueError, match=r"built with all-MiniLM-L6-v2\+onnx-int8 .* embedder is all-MiniLM-L6-v2 "):
        Retriever(index, load_embedder(settings_factory(embedding_backend="torch")))
    assert list((Path(onnx_settings.cache_dir) / "embeddings" / "all-MiniLM-L6-v2+onnx-int8").glob("*.npy"))
