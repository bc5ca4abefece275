from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from index.errors import IngestError
from index.ingest import load_documents, text_doc_id
from index.text import fold
from tests.conftest import EDEN, SEEDS


class TestSeedCorpus:
    def test_both_seed_files_give_38_documents(self) -> None:
        docs = load_documents([SEEDS])
        assert len(docs) == 38
        assert len({d.doc_id for d in docs}) == 38
        assert sum(d.meta["source"].startswith("000_") for d in docs) == 19

    def test_ids_are_stable_and_independent_of_file_order(self, tmp_path: Path) -> None:
        files = sorted(SEEDS.glob("*.txt"))
        forward = {d.doc_id for d in load_documents(files)}
        backward = {d.doc_id for d in load_documents(list(reversed(files)))}
        # a copy under other names, in the other order, gives the same ids
        for i, f in enumerate(reversed(files)):
            shutil.copy(f, tmp_path / f"{i}_renamed.txt")
        renamed = {d.doc_id for d in load_documents([tmp_path])}
        assert forward == backward == renamed
        assert EDEN in forward

    def test_eden_text_kept_verbatim_and_labelled_from_its_text(self) -> None:
        eden = next(d for d in load_documents([SEEDS]) if d.doc_id == EDEN)
        assert "scaled up to 28 billion parameters" in eden.text
        assert eden.title == ""
        assert eden.label.startswith("Foundation models for genomics")
        assert fold(eden.text).startswith(eden.label.rstrip("…"))

    def test_latex_markdown_and_unicode_are_kept_in_stored_text(self) -> None:
        texts = " ".join(d.text for d in load_documents([SEEDS]))
        for raw in ("\\", "$", "**", "₁", "–"):
            assert raw in texts

    def test_header_line_is_not_a_document(self) -> None:
        assert not any("论文列表" in d.text for d in load_documents([SEEDS]))

    def test_duplicate_documents_are_stored_once(self, tmp_path: Path) -> None:
        seed = sorted(SEEDS.glob("*.txt"))[0]
        shutil.copy(seed, tmp_path / "copy.txt")
        assert len(load_documents([seed, tmp_path / "copy.txt"])) == 19

    def test_text_id_ignores_case_and_whitespace(self) -> None:
        assert text_doc_id("Hello   World\n") == text_doc_id("hello world")
        assert text_doc_id("Hello world") != text_doc_id("Hello world!")


class TestJsonl:
    def test_ids_titles_and_metadata_are_kept(self, tmp_path: Path) -> None:
        path = tmp_path / "c.jsonl"
        rows = [
            {"id": "p1", "title": "A title", "abstract": "First text.", "venue": "icml", "year": 2019},
            {"_id": "p2", "title": "", "text": "Second text. More."},
            {"text": "No id here."},
        ]
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        docs = load_documents([path])
        assert [d.doc_id for d in docs] == ["p1", "p2", text_doc_id("No id here.")]
        assert docs[0].label == "A title" and docs[0].meta["venue"] == "icml" and docs[0].meta["year"] == 2019
        assert docs[1].title == "" and docs[1].label == "Second text."

    def test_gzipped_beir_corpus(self, tmp_path: Path) -> None:
        path = tmp_path / "corpus.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"_id": "4983", "title": "T", "text": "Body.", "metadata": {}}\n'))
        (doc,) = load_documents([path])
        assert (doc.doc_id, doc.title, doc.text) == ("4983", "T", "Body.")


class TestBadInput:
    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("bad.txt", b"Header\n\nfine line\n\nbad \xff byte\n", r"bad\.txt:5: invalid UTF-8"),
            ("bad.jsonl", b'{"text": "ok"}\n[1, 2]\n', r"bad\.jsonl:2: expected a JSON object, got list"),
            ("bad.jsonl", b'{"text": "ok"}\n{"title": "no text"}\n', r"bad\.jsonl:2: missing or empty 'text'"),
            ("bad.jsonl", b'{"text": "ok"}\n{not json\n', r"bad\.jsonl:2: not valid JSON"),
            ("empty.txt", b"  \n\n", r"empty\.txt: file is empty"),
            ("header.txt", b"ICML 2026\n\n  \n", r"header\.txt:1: only a header line"),
            ("lone.jsonl", b'{"text": "ok"}\n{"text": "\\ud800 lone"}\n', r"lone\.jsonl:2: text holds a character that is not valid"),
            ("dup.jsonl", b'{"id": "x", "text": "one"}\n{"id": "x", "text": "two"}\n', r"dup\.jsonl:2: document id 'x'"),
        ],
    )
    def test_error_names_file_and_line(self, tmp_path: Path, name: str, content: bytes, message: str) -> None:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(IngestError, match=message):
            load_documents([path])

    def test_missing_path_and_unsupported_type(self, tmp_path: Path) -> None:
        with pytest.raises(IngestError, match="no such file"):
            load_documents([tmp_path / "nope.txt"])
        (tmp_path / "x.pdf").write_text("x")
        with pytest.raises(IngestError, match="unsupported file type"):
            load_documents([tmp_path / "x.pdf"])
