"""Shared fixtures. Real models are loaded once per session; every index is built into a temporary directory."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Builds in tests do not read or fill the user's embedding cache (tests of the cache give it a temporary cache_dir).
os.environ.setdefault("CITERAG_EMBEDDING_CACHE", "false")

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "data" / "icml2026"
API_KEY = "test-key-0123456789"
EDEN = "426b26a7dd0533a9"  # doc_id of the EDEN abstract (sha256 of its normalised text)
# One abstract-like sentence per script, with a query in that script that only it matches (BM25).
SCRIPTS: dict[str, tuple[str, str]] = {
    "zh": ("我们提出一种大型语言模型的检索增强生成方法，并引用来源。", "检索增强"),
    "ja": ("データ分析のための新しいモデルを提案する。", "モデル"),
    "ar": ("نقترح نموذجًا لغويًا كبيرًا للاسترجاع المعزز بالتوليد.", "للاسترجاع"),
    "el": ("Προτείνουμε ένα μεγάλο γλωσσικό μοντέλο για ανάκτηση.", "ΜΟΝΤΕΛΟ ανακτηση"),
    "ru": ("Мы предлагаем большую языковую модель для поиска.", "языковую модель"),
    "hi": ("हम खोज के लिए एक बड़ा भाषा मॉडल प्रस्तुत करते हैं।", "भाषा मॉडल"),
    "fr": ("Une approche naïve du résumé automatique, déjà évaluée.", "naive resume"),
}


class HashEmbedder:
    """Deterministic stand-in encoder for storage/fusion unit tests (not a model): bag of hashed words,
    float32 (n, dim), L2-normalised."""

    name = "hash-embedder"
    dim = 32

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


class StandInIndex:
    """An index directory built with the real chunker, BM25 and FAISS but the :class:`HashEmbedder` stand-in, for
    tests where storage or retrieval logic, not the model, is the subject.

    Args:
        root: the index directory.
        tokenizer: the embedding model's tokenizer (the ``tokenizer`` fixture), which sizes the passages.
        config: :class:`~citerag.index.store.IndexConfig` fields to override (e.g. ``bm25_method="atire"``).
    """

    def __init__(self, root: Path, tokenizer, **config) -> None:
        from citerag.index.chunking import Chunker
        from citerag.index.store import IndexConfig, IndexStore

        self.embedder = HashEmbedder()
        self.chunker = Chunker(tokenizer, 256, 128, 64)
        self.config = IndexConfig(self.embedder.name, self.embedder.dim, 256, 128, 64, **config)
        self.store = IndexStore(root)

    def build(self, documents: list) -> Path:
        """Index ``documents`` (a list of :class:`~citerag.index.types.Document`) as the new live version."""
        from citerag.index.build import build_index

        return build_index(documents, self.store, self.embedder, self.chunker, self.config, show_progress=False)

    def retriever(self, documents: list | None = None):  # noqa: ANN201 - index.retrieve.Retriever
        """A retriever over the live version, after indexing ``documents`` when given."""
        from citerag.index.retrieve import Retriever

        if documents is not None:
            self.build(documents)
        return Retriever(self.store.load(), self.embedder)


@pytest.fixture()
def stand_in(tokenizer, tmp_path: Path) -> StandInIndex:
    """A :class:`StandInIndex` in ``tmp_path / "idx"`` (default settings: 128-piece passages, Lucene BM25)."""
    return StandInIndex(tmp_path / "idx", tokenizer)
class CountingEmbedder(HashEmbedder):
    """HashEmbedder that records how many texts it was asked to embed (``embedded``) and the calls (``calls``)."""

    def __init__(self) -> None:
        self.embedded = 0
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        self.embedded += len(texts)
        self.calls.append(list(texts))
        return super().encode(texts)


@pytest.fixture(scope="session")
def tokenizer():
    """The embedding model's own tokenizer (fast to load; no weights)."""
    from transformers import AutoTokenizer

    from citerag.service.model_files import embedding_model_dir

    return AutoTokenizer.from_pretrained(str(embedding_model_dir()))


@pytest.fixture()
def seed_corpus(tmp_path: Path) -> Path:
    """A directory holding a copy of the first seed file (19 abstracts), free to edit."""
    import shutil

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seed = sorted(SEEDS.glob("*.txt"))[0]
    shutil.copy(seed, corpus / seed.name)
    return corpus


@pytest.fixture(scope="session")
def settings_factory(tmp_path_factory: pytest.TempPathFactory):
    from citerag.service.settings import Settings

    def make(**overrides) -> Settings:
        overrides.setdefault("index_dir", tmp_path_factory.mktemp("index"))
        # no papers read in the background: tests damage index files under live apps (test_durability.py), and a
        # question about a paper not read ahead reads it itself (test_whole_paper.py tests reading ahead)
        overrides.setdefault("read_papers_ahead", False)
        return Settings(**overrides)

    return make


@pytest.fixture(scope="session")
def seed_settings(settings_factory):
    """Settings whose index directory holds the real index of the 38 seed abstracts (built once)."""
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup

    settings = settings_factory(corpus=[SEEDS])
    ensure_index(index_setup(settings), show_progress=False)
    return settings


@pytest.fixture(scope="session")
def api_client(seed_settings) -> Iterator:
    """A TestClient over the real app (real index, embedder and default generator); writes need ``API_KEY``."""
    from fastapi.testclient import TestClient
    from pydantic import SecretStr

    from citerag.service.api import create_app

    # a key is set, so generated requests (schemathesis) cannot change the shared index: writes get 401
    with TestClient(create_app(seed_settings.model_copy(update={"api_key": SecretStr(API_KEY)}))) as client:
        yield client


@contextmanager
def serving(app, lifespan: str = "on") -> Iterator[str]:
    """Serve ``app`` over real HTTP: uvicorn in a background thread on 127.0.0.1 and a free port (the OS picks it).

    Args:
        lifespan: ``"on"`` runs the app's lifespan (loads index and models); ``"off"`` serves an app whose lifespan
            already ran (e.g. ``api_client.app``), sharing its loaded models.

    Yields:
        The base URL, e.g. ``http://127.0.0.1:41234``.

    Raises:
        RuntimeError: the server stopped before it started listening (its error is in the log).
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan=lifespan, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    while not server.started:  # the lifespan may load models first: minutes on a busy machine
        if not thread.is_alive():
            raise RuntimeError("uvicorn stopped before listening; see its log above")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


@pytest.fixture(scope="session")
def live_server(api_client) -> Iterator[str]:
    """The ``api_client`` app (real index and models, already started) served over real HTTP; the base URL."""
    with serving(api_client.app, lifespan="off") as url:
        yield url
@pytest.fixture()
def client_for(settings_factory) -> Iterator[Callable[..., object]]:
    """Factory: ``client_for(corpus, **settings)`` starts the real app (lifespan included: the index is built from
    ``corpus``, a list of paths, into a fresh directory) and returns its TestClient, closed at teardown. The
    embedder and the generator are the process's (loaded once: ``citerag.service.pipeline``)."""
    from fastapi.testclient import TestClient

    from citerag.service.api import create_app

    with ExitStack() as stack:

        def make(corpus: list[Path], **overrides) -> TestClient:
            app = create_app(settings_factory(corpus=corpus, **overrides))
            return stack.enter_context(TestClient(app))

        yield make


class SmallDisk:
    """A real, size-limited file system (a tmpfs) to fill: writes on it meet ``ENOSPC`` as on a full disk.

    Attributes:
        root: its mount point.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self, leave: int = 0) -> int:
        """Write the filler until the file system is full, then cut it by ``leave`` bytes (tmpfs frees whole 4 KiB
        pages). Returns the bytes free afterwards."""
        import errno

        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            block = b"\0" * (1 << 16)
            while True:
                try:
                    if os.write(fd, block) == 0:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(block) == 1:
                        break
                    block = block[: len(block) // 2]
        finally:
            os.close(fd)
        if leave:
            os.truncate(self.filler, max(0, self.filler.stat().st_size - leave))
        return self.free_bytes()

    def empty(self) -> None:
        """Remove the filler: the space comes back."""
        self.filler.unlink(missing_ok=True)

    def free_bytes(self) -> int:
        import shutil

        return shutil.disk_usage(self.root).free


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """An 8 MiB tmpfs mounted at ``tmp_path / "disk"`` (mounting needs root, or CAP_SYS_ADMIN: skipped without),
    unmounted at teardown (lazily when a test still maps one of its files)."""
    import gc
    import shutil
    import subprocess

    root = tmp_path / "disk"
    root.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: a full disk is simulated with a small tmpfs")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", str(root)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN; uid {os.geteuid()}): "
                    f"{(mounted.stderr or mounted.stdout).strip()}")
    try:
        yield SmallDisk(root)
    finally:
        gc.collect()  # memory maps of the index's files held by dead objects
        if subprocess.run(["umount", str(root)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(root)], check=True)
