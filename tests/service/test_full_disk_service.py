"""A full disk under the service: a write is answered 507 with what to free, the live version keeps serving,
``/health`` reports the condition until a write succeeds, acknowledged writes survive a restart and refused ones do
not; ``citerag index PATHS`` exits 2 with one line and leaves the previous version live; the paper-state cache
skips a state it cannot save without failing the question.

Real files on a real 8 MiB tmpfs filled to the brim (``small_disk``; skipped where mounting is refused), the real
app (routes, handlers, key check), CLI, chunker, BM25 and FAISS; the stand-in embedder (the model is not the
subject), so no model is loaded.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from citerag.index.diskspace import WATCH
from citerag.index.store import IndexStore, LoadedIndex
from tests.conftest import API_KEY, HashEmbedder, SmallDisk, StandInIndex
from tests.index.test_recovery import doc, restart

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(autouse=True)
def no_conditions() -> Iterator[None]:
    WATCH.reset()
    yield
    WATCH.reset()


@contextmanager
def app_over(s: StandInIndex, index: LoadedIndex | None = None) -> Iterator[TestClient]:
    """The real app over an embedded backend serving ``s``'s live version (``index``: one already loaded, as a
    start after recovery serves it); the lifespan is not run (the client is not entered), so no model loads."""
    from citerag.index.embedded import EmbeddedBackend
    from citerag.index.retrieve import Retriever
    from citerag.service.api import create_app
    from citerag.service.settings import Settings
    from citerag.service.state import AdmissionGate, AnswererLoader, Service, WriteGuard

    backend = EmbeddedBackend(s.store, index or s.store.load(), lambda live: Retriever(live, s.embedder), s.embedder,
                              s.chunker, s.config)
    settings = Settings(index_dir=s.store.root)
    app = create_app(settings)
    app.state.service = Service(
        backend, AnswererLoader(lambda: None), AdmissionGate(2), WriteGuard(API_KEY, "127.0.0.1"),  # type: ignore[arg-type,return-value]
        app.state.metrics, 5, settings.history_max_turns, settings.history_max_chars,
    )
    client = TestClient(app)
    try:
        yield client
    finally:
        client.close()


def batch(n: int, words: int = 900) -> list[dict]:
    """``n`` documents of ``words`` distinct words each (several KiB apiece: the log needs new pages for them)."""
    return [{"id": f"new{i}", "text": " ".join(f"w{i}x{j}" for j in range(words))} for i in range(n)]


def ids(client: TestClient) -> list[str]:
    return sorted(d["doc_id"] for d in client.get("/documents", params={"limit": 1000}).json()["documents"])


def top(client: TestClient, query: str) -> str:
    response = client.post("/search", json={"query": query, "k": 1, "mode": "bm25"})
    assert response.status_code == 200, response.text
    return response.json()["results"][0]["doc_id"]


@pytest.mark.parametrize("leave", [0, 48 * 1024], ids=["log-refused", "version-refused"])
def test_a_write_on_a_full_disk_is_a_507_and_the_live_version_goes_on_serving(
    small_disk: SmallDisk, tokenizer, leave: int
) -> None:
    s = StandInIndex(small_disk.root / "idx", tokenizer)
    s.build([doc(i) for i in range(3)])
    root = s.store.root
    with app_over(s) as client:
        acknowledged = client.post("/documents", json=[{"id": "ack", "text": "Zorblax quantisation halves memory."}],
                                   headers=AUTH)
        assert acknowledged.status_code == 200 and acknowledged.json()["added"] == ["ack"]
        assert client.get("/health").json()["disk"] == {
            "status": "ok", "part": None, "path": None, "filesystem": None, "free_bytes": None, "since": None,
            "detail": None, "conditions": []}
        live = s.store.current()
        small_disk.fill(leave)

        refused = client.post("/documents", json=batch(4), headers=AUTH)
        deleted = client.delete("/documents/d1", headers=AUTH)

        assert refused.status_code == 507 and deleted.status_code == 507, deleted.text
        body = refused.json()
        assert (body["error"], body["part"], body["path"], body["filesystem"], body["quota"]) == (
            "DiskFull", "index", str(root), str(small_disk.root), False)
        assert 0 <= body["free_bytes"] <= leave + 8192
        assert body["detail"].startswith(f"index write to {root} failed, no space left on device: free space on "
                                         f"{small_disk.root} (")
        assert body["free"].startswith("remove damaged versions (versions/damaged/)") and body["free"] in body["detail"]
        # nothing half-written: the same live version, no temporary version, a log that parses
        assert s.store.current() == live and list(s.store.versions.glob(".tmp-*")) == []
        s.store.log.read()
        # the live version goes on serving, the refused writes are not in it
        assert ids(client) == ["ack", "d0", "d1", "d2"]
        assert top(client, "zorblax quantisation") == "ack" and top(client, "topic1 method1") == "d1"
        assert client.get("/documents/new0").status_code == 404
        health = client.get("/health").json()
        assert health["status"] == "ok" and health["documents"] == 4
        disk = health["disk"]
        assert (disk["status"], disk["part"], disk["path"], disk["filesystem"]) == (
            "full", "index", str(root), str(small_disk.root))
        assert disk["free_bytes"] == small_disk.free_bytes() and disk["detail"] == body["detail"]
        assert datetime.fromisoformat(disk["since"]).tzinfo is not None
        assert [c["failures"] for c in disk["conditions"]] == [2]  # the POST and the DELETE

    # a restart on the full disk: every acknowledged write, no refused one (nothing to replay, nothing written)
    with app_over(s, restart(s)) as client:
        assert ids(client) == ["ack", "d0", "d1", "d2"]

        small_disk.empty()  # space returns: the next write succeeds, no restart needed
        written = client.post("/documents", json=batch(4), headers=AUTH)
        assert written.status_code == 200, written.text
        assert written.json()["added"] == ["new0", "new1", "new2", "new3"]
        assert client.delete("/documents/d1", headers=AUTH).status_code == 200
        assert client.get("/health").json()["disk"]["status"] == "ok"
        assert top(client, "w2x17") == "new2"
    assert sorted(restart(s).documents) == ["ack", "d0", "d2", "new0", "new1", "new2", "new3"]


def test_a_rebuild_on_a_full_disk_exits_2_with_one_line_and_leaves_the_previous_version(
    small_disk: SmallDisk, tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``citerag index PATHS`` (the real command, with the stand-in embedder in place of the model)."""
    from citerag.service import pipeline
    from citerag.service.cli import app

    class StandInModel(HashEmbedder):
        max_seq_length = 256
        tokenizer = None

    model = StandInModel()
    model.tokenizer = tokenizer
    monkeypatch.setattr(pipeline, "load_embedder", lambda settings=None: model)
    index_dir = small_disk.root / "idx"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps({"id": f"d{i}", "text": doc(i).text}) + "\n" for i in range(3)))
    bigger = tmp_path / "bigger.jsonl"
    bigger.write_text("".join(json.dumps(row) + "\n" for row in batch(40)))
    runner = CliRunner()

    built = runner.invoke(app, ["index", str(first), "--index-dir", str(index_dir)])
    assert built.exit_code == 0, built.output
    store = IndexStore(index_dir)
    live = store.current()
    small_disk.fill()

    result = runner.invoke(app, ["index", str(bigger), "--index-dir", str(index_dir)])

    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith(
        f"error: index write to {index_dir} failed, no space left on device: free space on {small_disk.root} (")
    assert "remove damaged versions" in result.output
    assert store.current() == live and list(store.versions.glob(".tmp-*")) == []
    assert sorted(store.load().documents) == ["d0", "d1", "d2"]
    assert [e.op for e in store.log.read().entries] == ["reset"]  # the refused build left nothing in the log
    [condition] = WATCH.conditions()
    assert (condition.error.part, condition.error.path) == ("index", str(index_dir))

    small_disk.empty()
    again = runner.invoke(app, ["index", str(bigger), "--index-dir", str(index_dir)])
    assert again.exit_code == 0, again.output
    assert sorted(store.load().documents) == sorted(f"new{i}" for i in range(40)) and WATCH.conditions() == []


class StateWriter:
    """A generator stand-in for the paper-state cache: "reading" a prompt writes its state file (``size`` bytes)
    into ``state_dir`` as llama.cpp's slot save does; a failed write is a RuntimeError from the OSError, as
    :meth:`citerag.service.generator.Generator._save` raises it."""

    state_identity = "stand-in"

    def __init__(self, state_dir: Path, size: int = 1 << 20) -> None:
        self.state_dir = state_dir
        self.size = size
        self.saved: list[str] = []

    def has_state(self, name: str) -> bool:
        return (self.state_dir / name).is_file()

    def restore_state(self, name: str, slot: int = 0) -> bool:
        return True

    def read_and_save(self, messages: list, name: str, slot: int = 0, fixed: int | None = None) -> None:
        partial = self.state_dir / f"{name}.partial"
        try:
            partial.write_bytes(b"\1" * self.size)
            partial.replace(self.state_dir / name)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"saving the prompt state {name} failed: {exc}") from exc
        self.saved.append(name)


def test_the_paper_state_cache_skips_a_state_it_has_no_room_for(small_disk: SmallDisk) -> None:
    from citerag.service.answering.states import PaperStates

    directory = small_disk.root / "paper-states"
    directory.mkdir()
    states = PaperStates(StateWriter(directory), max_bytes=64 << 20)  # type: ignore[arg-type]
    paper = [{"role": "system", "content": "s"}, {"role": "user", "content": "paper one"}]
    small_disk.fill()

    assert states.ready(paper) is False  # not saved: the question reads the prompt in full, nothing raised
    assert list(directory.iterdir()) == []
    [condition] = WATCH.conditions()
    assert (condition.error.part, condition.error.path, condition.error.free_bytes) == (
        "paper-state cache", str(directory), 0)
    assert states.ready(paper) is False and states.generator.saved == []  # type: ignore[attr-defined]

    small_disk.empty()  # room again: the state is saved at the next question, the condition cleared
    assert states.ready(paper) is True
    assert states.generator.saved == [states.name(paper)] and WATCH.conditions() == []  # type: ignore[attr-defined]


def test_a_backup_to_a_full_disk_is_a_507_and_leaves_nothing_there(
    small_disk: SmallDisk, stand_in: StandInIndex
) -> None:
    stand_in.build([doc(i) for i in range(3)])
    dest = small_disk.root / "backups" / "bk"
    dest.parent.mkdir()
    small_disk.fill()
    with app_over(stand_in) as client:
        response = client.post("/admin/backup", json={"dest": str(dest)}, headers=AUTH)

        assert response.status_code == 507, response.text
        body = response.json()
        assert (body["error"], body["part"], body["path"], body["filesystem"], body["free_bytes"]) == (
            "DiskFull", "backup", str(dest.parent), str(small_disk.root), 0)
        assert body["free"].startswith("choose a destination with room for the live version")
        assert list(dest.parent.iterdir()) == []  # neither DEST nor its temporary directory
        assert client.get("/health").json()["disk"]["status"] == "ok"  # the index's own disk is not full


def test_the_cli_says_what_to_free_for_a_full_disk_met_outside_the_index(small_disk: SmallDisk) -> None:
    """Any command (``one_line_errors``): a raw ENOSPC, or FAISS's RuntimeError, is one line and exit 2; another
    RuntimeError is not hidden."""
    import typer

    from citerag.service.cli import one_line_errors

    small_disk.fill()
    target = small_disk.root / "out" / "export.jsonl"
    target.parent.mkdir()
    cli = typer.Typer()

    @cli.command()
    @one_line_errors
    def write(what: str) -> None:
        if what == "open":  # the file cannot even be created: the error names it
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        if what == "file":  # a write to an open file: no name
            target.write_text("x" * 100_000)
        elif what == "faiss":
            raise RuntimeError(f"write error in {target}: 1 != 2 (No space left on device)")
        else:
            raise RuntimeError("something else")

    named = CliRunner().invoke(cli, ["open"])
    assert named.exit_code == 2 and named.output == (
        f"error: file write to {target.parent} failed, no space left on device: free space on {small_disk.root} "
        "(0 B free): remove files there or raise the disk quota, then retry\n")
    unnamed = CliRunner().invoke(cli, ["file"])
    assert unnamed.exit_code == 2 and unnamed.output == (
        "error: a write failed for space ([Errno 28] No space left on device): free space on the file system it "
        "wrote to, or raise the disk quota, then retry\n")
    faiss = CliRunner().invoke(cli, ["faiss"])
    assert faiss.exit_code == 2 and faiss.output.startswith(f"error: a write failed for space (write error in {target}")
    other = CliRunner().invoke(cli, ["other"])
    assert other.exit_code == 1 and isinstance(other.exception, RuntimeError)
