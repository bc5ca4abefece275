"""bench/soak.py: its write check and client mix on their own, and a 30-second soak of a real ``citerag serve`` (the
shipped corpus's 38 abstracts, the real embedder and generator) that answers no 5xx, loses no acknowledged write,
sends every kind of request and reports every field. No assertion on a timing: the figures depend on the machine."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.soak import Ledger, check_writes, roles_of, slope_per_minute
from tests.conftest import ROOT


def test_64_clients_are_48_searchers_4_askers_8_writers_and_4_deleters() -> None:
    roles = roles_of(64, 4)
    assert len(roles) == 64
    assert {kind: roles.count(kind) for kind in set(roles)} == {"search": 48, "ask": 4, "write": 8, "delete": 4}
    with pytest.raises(ValueError, match="no searcher"):
        roles_of(6, 4)


def test_slope_is_least_squares_per_minute() -> None:
    assert slope_per_minute([(0.0, 10.0), (60.0, 12.0), (120.0, 14.0)]) == pytest.approx(2.0)
    assert slope_per_minute([(60.0, 1.0)]) is None


def test_the_check_finds_lost_writes_and_deletes_that_came_back_and_skips_unknown_ones() -> None:
    """A fake service that lost one acknowledged write, changed another's text, kept an acknowledged delete and
    holds a document whose write failed: the check reports exactly the first three."""
    ledger = Ledger()
    rng = random.Random(0)

    def write(doc_id: str, text: str, status: int | None) -> None:
        if doc_id not in ledger.docs:
            ledger.new(doc_id)
        else:
            ledger.claim(doc_id)
        ledger.wrote(doc_id, text, status, {"added": [doc_id]} if status == 200 else {"detail": "boom"})

    for doc_id in ("kept", "lost", "changed", "deleted", "resurrected"):
        write(doc_id, f"text of {doc_id}", 200)
    write("failed", "text of failed", None)  # no answer: unknown, not checked
    write("refused", "text of refused", 422)  # refused: never written, not checked
    write("kept", "new text of kept", 500)  # a failed replacement: either text will do
    for doc_id in ("deleted", "resurrected"):
        ledger.deleted(ledger.claim(doc_id), 200)
    assert ledger.take(rng) in {"kept", "lost", "changed"}  # a present one, now busy
    assert ledger.acknowledged_writes == 5 and ledger.acknowledged_deletes == 2

    held = {"kept": "new text of kept", "changed": "another text", "resurrected": "text of resurrected",
            "failed": "text of failed"}

    def handle(request: httpx.Request) -> httpx.Response:
        doc_id = request.url.path.removeprefix("/documents/")
        return httpx.Response(200, json={"text": held[doc_id]}) if doc_id in held else httpx.Response(404)

    report = asyncio.run(check_writes("http://soak.test", ledger, transport=httpx.MockTransport(handle)))
    assert report["lost"] == ["changed", "lost"]
    assert report["resurrected"] == ["resurrected"]
    assert report["check_errors"] == []
    assert (report["checked_present"], report["checked_absent"], report["unknown"]) == (3, 2, 1)


@pytest.mark.slow
def test_a_30_second_soak_of_a_real_service_loses_no_write_and_answers_no_5xx(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    # no papers read ahead (a quiet service sooner); the bench's temporary index goes under tmp_path
    env = {**os.environ, "CITERAG_READ_PAPERS_AHEAD": "false", "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)}
    # one asker: a question takes the model a while on a small machine, and the soak waits for the last one
    command = [sys.executable, "-m", "bench.soak", "--seconds", "30", "--ask-clients", "1", "--baseline-requests",
               "30", "--json", str(out)]
    result = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))

    assert report.keys() == {"url", "pid", "clients", "think_ms", "duration_s", "window_s", "requests", "errors",
                             "five_xx", "transport_errors", "failures", "latency", "windows", "resources", "baseline",
                             "writes", "loads", "ok"}
    assert report["ok"] is True and report["five_xx"] == 0
    assert report["clients"] == {"search": 51, "ask": 1, "write": 8, "delete": 4}
    for kind in ("search", "ask", "write", "delete"):
        assert report["requests"][kind]["total"] > 0, kind
        assert sum(report["requests"][kind]["by_status"].values()) == report["requests"][kind]["total"]
        assert not any(status.startswith("5") for status in report["requests"][kind]["by_status"]), kind
        assert report["latency"][kind].keys() == {"n", "p50_ms", "p99_ms"}
        assert report["latency"][kind]["n"] == report["requests"][kind]["total"]

    writes = report["writes"]
    assert writes["lost"] == [] and writes["resurrected"] == [] and writes["check_errors"] == []
    assert writes["acknowledged_writes"] > 0 and writes["acknowledged_deletes"] > 0
    assert writes["checked_present"] + writes["checked_absent"] > 0
    assert writes.keys() >= {"acknowledged_writes", "acknowledged_deletes", "documents", "checked_present",
                             "checked_absent", "unknown", "skipped", "delete_not_found"}

    assert report["window_s"] == 5.0 and len(report["windows"]) == 6
    for window in report["windows"]:
        assert window.keys() == {"start_s", "end_s", "search", "ask", "rss_bytes", "fds"}
        assert window["rss_bytes"] > 0 and window["fds"] > 0
    for kind in ("search", "ask"):  # each request in the window it was sent in
        assert sum(window[kind]["n"] for window in report["windows"]) == report["requests"][kind]["total"]

    resources = report["resources"]
    assert [s["t_s"] for s in resources["samples"]] == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
    assert all(s["rss_bytes"] > 0 and s["fds"] > 0 for s in resources["samples"])
    assert isinstance(resources["rss_slope_bytes_per_min"], float)
    assert isinstance(resources["fds_slope_per_min"], float)
    assert resources["rss_growth"].keys() == {"from_s", "to_s", "from_bytes", "to_bytes", "bytes", "percent"}
    assert (resources["rss_growth"]["from_s"], resources["rss_growth"]["to_s"]) == (5.0, 30.0)

    baseline = report["baseline"]
    assert baseline["requests"] == 30 and baseline["errors"] == 0
    assert baseline["p99_ms"] > 0 and baseline["under_load_p99_ms"] > 0 and baseline["p99_ratio"] > 0

    assert not Path(f"/proc/{report['pid']}").exists()  # the service it started was stopped
    assert "## Soak" in result.stdout and "verdict: PASS" in result.stdout
