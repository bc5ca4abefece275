"""Build progress bars: drawn on a terminal (chunking, embedding with passages/s and ETA), silent elsewhere."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from citerag.index.build import build_index, embed_passages
from citerag.index.chunking import Chunker
from citerag.index.ingest import load_documents
from citerag.index.progress import build_progress
from citerag.index.store import IndexConfig, IndexStore
from tests.conftest import SEEDS, CountingEmbedder, HashEmbedder


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=150), out


class TestBuildProgress:
    def test_a_terminal_gets_chunking_and_embedding_bars(self, tokenizer, tmp_path: Path) -> None:
        term, out = console(terminal=True)
        with build_progress(True, term) as progress:
            build_index(load_documents([SEEDS]), IndexStore(tmp_path), HashEmbedder(), Chunker(tokenizer),
                        IndexConfig("hash-embedder", 32, 256, 128, 64), progress=progress)
            tasks = {task.description: task for task in progress.tasks}
        assert tasks["chunking"].completed == tasks["chunking"].total == 38
        assert tasks["chunking"].fields["unit"] == "documents"
        assert tasks["embedding"].completed == tasks["embedding"].total > 38
        text = out.getvalue()
        assert "chunking" in text and "embedding" in text and "passages/s" in text and "ETA" in text

    def test_not_a_terminal_or_not_asked_draws_nothing(self, tokenizer, tmp_path: Path) -> None:
        for terminal, enabled in [(False, True), (True, False)]:
            pipe, out = console(terminal)
            with build_progress(enabled, pipe) as progress:
                embed_passages(HashEmbedder(), ["a b", "c"], [2, 1], progress)
            assert progress.disable and out.getvalue() == ""

    def test_embedding_goes_longest_first_in_steps_and_keeps_the_input_order(self) -> None:
        texts = [" ".join(["w"] * n) + f" t{n}" for n in range(1, 601)]
        inner = CountingEmbedder()
        vectors = embed_passages(inner, texts, [len(t) for t in texts])
        assert [len(call) for call in inner.calls] == [256, 256, 88]
        assert inner.calls[0][0] == texts[-1] and inner.calls[-1][-1] == texts[0]
        assert vectors.tobytes() == HashEmbedder().encode(texts).tobytes()
