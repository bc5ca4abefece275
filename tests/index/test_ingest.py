from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from citerag.index.errors import IngestError
from citerag.index.ingest import Corpus, load_documents, read_corpus, text_doc_id
from citerag.index.text import fold
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

    def test_an_integer_id_is_read_as_its_decimal_string(self, tmp_path: Path) -> None:
        path = tmp_path / "ints.jsonl"
        path.write_text('{"_id": 7, "text": "Seven."}\n{"id": "8", "text": "Eight."}\n{"id": null, "_id": "n", "text": "N."}\n'
                        '{"id": "", "_id": "e", "text": "E."}\n')
        assert [d.doc_id for d in load_documents([path])] == ["7", "8", "n", "e"]  # a null or empty id: _id

    def test_a_truncated_gzip_is_an_ingest_error(self, tmp_path: Path) -> None:
        path = tmp_path / "cut.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"_id": "1", "text": "Body."}\n' * 50)[:-8])
        with pytest.raises(IngestError, match="the gzip file is truncated or corrupt"):
            load_documents([path])

    def test_gzipped_beir_corpus(self, tmp_path: Path) -> None:
        path = tmp_path / "corpus.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"_id": "4983", "title": "T", "text": "Body.", "metadata": {}}\n'))
        (doc,) = load_documents([path])
        assert (doc.doc_id, doc.title, doc.text) == ("4983", "T", "Body.")


class TestEmptyAndDuplicateRecords:
    def test_records_without_text_are_skipped_and_reported(self, tmp_path: Path) -> None:
        path = tmp_path / "c.jsonl"
        rows = [{"id": "a", "text": "Kept."}, {"id": "b", "text": ""}, {"id": "c", "title": "Title only", "text": "  \n"},
                {"id": "d", "text": None, "abstract": None}, {"id": "e", "text": "$$ ** {}"}, {"id": "f", "abstract": "Kept too."}]
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        corpus = read_corpus([path])
        assert [d.doc_id for d in corpus.documents] == ["a", "f"]
        assert corpus.skipped == [f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:5"]
        assert load_documents([path]) == corpus.documents

    def test_a_corpus_of_empty_records_or_no_source_is_empty(self, tmp_path: Path) -> None:
        path = tmp_path / "blank.jsonl"
        path.write_text('{"text": " "}\n{"text": "\\t"}\n')
        assert read_corpus([path]).documents == [] and read_corpus([path]).skipped == [f"{path}:1", f"{path}:2"]
        assert read_corpus([]) == Corpus([], [])

    def test_a_source_holding_nothing_is_still_an_error(self, tmp_path: Path) -> None:
        (tmp_path / "empty").mkdir()
        with pytest.raises(IngestError, match=r"empty: no \.txt, \.jsonl, \.jsonl\.gz files in this directory"):
            load_documents([tmp_path / "empty"])

    def test_the_same_id_and_text_twice_keeps_the_first_title_and_metadata(self, tmp_path: Path) -> None:
        path = tmp_path / "d.jsonl"
        path.write_text('{"id": "x", "title": "First", "text": "Same  text.", "year": 2020}\n'
                        '{"id": "x", "title": "Second", "text": "same text.", "year": 2021}\n')
        (doc,) = load_documents([path])
        assert (doc.title, doc.text, doc.meta["year"], doc.meta["line"]) == ("First", "Same  text.", 2020, 1)


class TestBadInput:
    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("bad.txt", b"Header\n\nfine line\n\nbad \xff byte\n", r"bad\.txt:5: invalid UTF-8"),
            ("bad.jsonl", b'{"text": "ok"}\n[1, 2]\n', r"bad\.jsonl:2: expected a JSON object, got list"),
            ("bad.jsonl", b'{"text": "ok"}\n{"title": "no text"}\n', r"bad\.jsonl:2: missing 'text' \(or 'abstract'\) field"),
            ("bad.jsonl", b'{"text": "ok"}\n{"text": 0}\n', r"bad\.jsonl:2: 'text' must be a string, got int"),
            ("bad.jsonl", b'{"text": "ok"}\n{not json\n', r"bad\.jsonl:2: not valid JSON"),
            ("bad.jsonl", b'{"text": "ok"}\n{"id": true, "text": "ok"}\n', r"bad\.jsonl:2: 'id' must be a string or an integer, got bool"),
            ("bad.jsonl", b'{"text": "ok"}\n{"_id": [1], "text": "ok"}\n', r"bad\.jsonl:2: '_id' must be a string or an integer, got list"),
            ("bad.jsonl", b'{"id": "a\\tb", "text": "ok"}\n', r"bad\.jsonl:1: 'id' must not contain control characters"),
            ("bad.jsonl", b'{"id": "a\\u2028b", "text": "ok"}\n', r"bad\.jsonl:1: 'id' must not contain control characters"),
            ("bad.jsonl", b'{"id": ' + b"9" * 5000 + b', "text": "ok"}\n', r"bad\.jsonl:1: a number has more than 4300 digits"),
            ("empty.txt", b"  \n\n", r"empty\.txt: file is empty"),
            ("header.txt", b"ICML 2026\n\n  \n", r"header\.txt:1: only a header line"),
            ("lone.jsonl", b'{"text": "ok"}\n{"text": "\\ud800 lone"}\n', r"lone\.jsonl:2: text holds a character that is not valid"),
        ],
    )
    def test_error_names_file_and_line(self, tmp_path: Path, name: str, content: bytes, message: str) -> None:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(IngestError, match=message):
            load_documents([path])

    def test_same_id_with_another_text_is_rejected_naming_both_places(self, tmp_path: Path) -> None:
        (tmp_path / "a.jsonl").write_text('{"id": "x", "text": "One text."}\n')
        (tmp_path / "b.jsonl").write_text('{"id": "y", "text": "Other."}\n{"id": "x", "text": "Two text."}\n')
        with pytest.raises(IngestError) as error:
            load_documents([tmp_path])
        assert str(error.value) == (
            f"{tmp_path / 'b.jsonl'}:2: document id 'x' appears again with a different text (first at a.jsonl:1); "
            "ids must be unique: give one of them another id or remove it"
        )

    def test_later_wins_lets_a_later_file_replace_a_record_but_not_repeat_one_in_a_file(self, tmp_path: Path) -> None:
        (tmp_path / "a.jsonl").write_text('{"id": "x", "text": "One text."}\n{"id": "y", "text": "Why."}\n')
        (tmp_path / "b.jsonl").write_text('{"id": "x", "text": "Two text."}\n')
        corpus = read_corpus([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], later_wins=True)
        assert [(d.doc_id, d.text) for d in corpus.documents] == [("x", "Two text."), ("y", "Why.")]
        assert corpus.origins == {"x": 1, "y": 0}
        with pytest.raises(IngestError, match="document id 'x' appears again"):  # two files of one directory
            read_corpus([tmp_path], later_wins=True)

    def test_missing_path_and_unsupported_type(self, tmp_path: Path) -> None:
        with pytest.raises(IngestError, match="no such file"):
            load_documents([tmp_path / "nope.txt"])
        (tmp_path / "x.pdf").write_text("x")
        with pytest.raises(IngestError, match="unsupported file type"):
            load_documents([tmp_path / "x.pdf"])
