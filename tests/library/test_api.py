"""The Python API, ``import citerag``: typed errors with the HTTP 4xx messages, the same stream events as
``POST /ask``, answers exported with their references, and the README's example on the shipped corpus with the
real models."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import citerag
from citerag.errors import DocumentNotFound, InvalidRequest
from citerag.service.answering import Answer, Citation
from citerag.service.schemas import AskResponse
from tests.conftest import ROOT, SEEDS
from tests.service.answering.fixed import result
from tests.service.test_streaming import StandIn, app_over

ML = ("Long contexts are costly. We propose LU-KV, a KV cache eviction method. LU-KV keeps 90% accuracy at "
      "10\\% memory, a $4\\times$ saving.")
ML2 = "We introduce GP-EquiFlow, a flow model with Gaussian process priors. GP-EquiFlow lowers error by 31%."


class _NoDocuments:
    """A backend that stores nothing (for the 404 of an unknown id)."""

    def get(self, doc_id: str) -> None:
        return None


def _http_detail(response) -> Any:  # noqa: ANN001 - an httpx response
    body = response.json()["detail"]
    return [{**e, "loc": e["loc"][1:]} for e in body] if isinstance(body, list) else body


HISTORY = [{"role": "user", "content": f"question {i}?"} for i in range(21)]  # one over the default bound of 20
BAD = [
    ("search", "/search", {"query": "", "k": 10}),
    ("search", "/search", {"query": "x", "k": 0}),
    ("search", "/search", {"query": "x", "k": 101}),
    ("search", "/search", {"query": "x", "mode": "sparse"}),
    ("search", "/search", {"query": "x", "filters": {"year": {"about": 2020}}}),
    ("ask", "/ask", {"question": "   "}),
    ("ask", "/ask", {"question": "q?", "k": 21}),
    ("ask", "/ask", {"question": "q?", "history": HISTORY}),
    ("ask", "/ask", {"question": "q?", "history": [{"role": "system", "content": "x"}]}),
    ("add", "/documents", []),
    ("add", "/documents", [{"id": "a", "text": "  "}]),
    ("add", "/documents", [{"id": "a", "text": "one"}, {"id": "a", "text": "two"}]),
]


@pytest.mark.parametrize(("method", "path", "body"), BAD, ids=[f"{p} {json.dumps(b)[:40]}" for _, p, b in BAD])
def test_bad_input_raises_invalid_request_with_the_http_422_messages(method: str, path: str, body: Any) -> None:
    client = TestClient(app_over(StandIn(["x"])))
    http = client.post(path, json=body)
    assert http.status_code == 422
    library = citerag.Library(None, lambda: StandIn(["x"]))
    with pytest.raises(InvalidRequest) as raised:
        library.add(body) if method == "add" else getattr(library, method)(**body)  # the HTTP fields are its arguments
    assert raised.value.errors == _http_detail(http)
    first = raised.value.errors[0]
    assert str(raised.value).splitlines()[0] == f"{'.'.join(map(str, first['loc'])) or 'input'}: {first['msg']}"


def test_an_unknown_document_raises_document_not_found_with_the_404_message() -> None:
    app = app_over(StandIn([]))
    app.state.service.backend = _NoDocuments()
    http = TestClient(app).get("/documents/no-such-id")
    assert http.status_code == 404
    with pytest.raises(DocumentNotFound) as raised:
        citerag.Library(_NoDocuments()).document("no-such-id")
    assert str(raised.value) == http.json()["detail"]


def test_ask_with_stream_yields_the_events_of_the_http_stream() -> None:
    tokens = ["Hé", "llo [1]"]
    http = TestClient(app_over(StandIn(tokens))).post("/ask", json={"question": "q?", "stream": True})
    sent = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1].removeprefix("data: ")))
            for block in http.text.strip().split("\n\n")]
    events = list(citerag.Library(None, lambda: StandIn(tokens)).ask("q?", stream=True))
    assert [(e.kind, e.json()) for e in events] == sent
    assert [e.kind for e in events] == ["passages", "evidence", "token", "token", "answer"]
    assert isinstance(events[-1].data, AskResponse) and events[-1].data.answer == "Héllo [1]"


def test_a_stream_closed_early_stops_the_model() -> None:
    answerer = StandIn([], endless=True)
    events = citerag.Library(None, lambda: answerer).ask("q?", stream=True)
    assert [next(events).kind for _ in range(3)] == ["passages", "evidence", "token"]
    events.close()
    assert answerer.stopped.wait(30)


def test_an_earlier_answer_is_history() -> None:
    seen: list[tuple] = []

    class Recorder(StandIn):
        def ask(self, question, k=None, filters=None, history=(), on_event=None, keep=()):  # noqa: ANN001
            seen.append(tuple(history))
            return super().ask(question, k, filters, history, on_event or (lambda *_: None), keep)

    library = citerag.Library(None, lambda: Recorder([]))
    first = library.ask("What is LU-KV?")
    library.ask("What does it evict?", history=[first])
    assert [(t.role, t.content) for t in seen[1]] == [("user", "What is LU-KV?"), ("assistant", "")]


def _exported() -> AskResponse:
    """An answer citing two sentences of one passage and one of another (passage numbers 2 and 1)."""
    lu, gp = result("lu", ML, rank=2), result("gp", ML2, rank=1)
    at = ML.index("LU-KV keeps")
    citations = [Citation(2, lu, at, len(ML)), Citation(1, gp, 0, ML2.index(".") + 1), Citation(2, lu, 26, 68)]
    answer = Answer("What do they do?", "LU-KV keeps 90% accuracy at 10% memory, a 4× saving [2]. GP-EquiFlow is a "
                    "flow model [1]. LU-KV evicts [2].", False, "", citations, [gp, lu])
    return AskResponse.of(answer)


def test_the_export_has_one_numbered_reference_per_cited_passage_quoting_the_stored_sentences() -> None:
    response = _exported()
    assert [(r.n, r.label, r.doc_id, len(r.quotes)) for r in response.references] == [
        (2, "LU-KV", "lu", 2), (1, "GP-EquiFlow", "gp", 1)]
    texts = {"lu": ML, "gp": ML2}
    markdown = response.markdown
    lines = [line for line in markdown.splitlines() if re.match(r"^\[\d+\] ", line)]
    assert [int(line[1:line.index("]")]) for line in lines] == [2, 1]
    for c in response.citations:
        assert f'"{texts[c.doc_id][c.start:c.end]}"' in lines[[2, 1].index(c.n)]
    assert "\\times$ saving" in markdown  # quoted as stored, LaTeX kept
    exported = json.loads(json.dumps(citerag.service.export.as_json(response)))
    assert exported["references"][0]["quotes"][0]["text"] == ML[ML.index("LU-KV keeps"):]
    assert exported["decision"] is None  # not a yes/no question


def test_the_export_carries_a_yes_no_decision() -> None:
    lu = result("lu", ML, rank=1)
    answer = Answer("Does LU-KV save memory?", "Yes. LU-KV keeps 90% accuracy at 10% memory [1].", False, "",
                    [Citation(1, lu, ML.index("LU-KV keeps"), len(ML))], [lu], decision="yes")
    exported = citerag.service.export.as_json(AskResponse.of(answer))
    assert exported["decision"] == "yes" and exported["answer"].startswith("Yes. LU-KV")


def _readme_example() -> str:
    """The README's Python example: the ```python block after the line naming it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- python-api-example", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_the_readme_example_runs_on_the_shipped_corpus_and_cites_a_passage(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "data").symlink_to(SEEDS.parent)  # the example's relative paths, from a scratch directory
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(_readme_example(), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    answer = namespace["answer"]
    assert isinstance(answer, citerag.AskResponse) and not answer.abstained, answer.reason
    assert answer.citations and answer.references
    assert re.search(r"\[\d+\]", answer.answer)
    library = namespace["papers"]
    for c in answer.citations:
        assert library.document(c.doc_id).text[c.start:c.end] == c.text
    assert "80.6%" in printed.getvalue() and "\\%" not in answer.answer_display.text
