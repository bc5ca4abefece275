"""``POST /admin/backup``: the API key as the writes need it, 422 naming ``dest``, and a backup that restores.

The real app (routes, handlers, key check) over an embedded backend holding a stand-in index (the stand-in embedder:
the model is not the subject); the lifespan is not run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citerag.index.backup import MANIFEST, verify_backup
from citerag.index.store import IndexStore
from tests.conftest import API_KEY, StandInIndex
from tests.index.test_recovery import doc

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture()
def client(stand_in: StandInIndex) -> Iterator[TestClient]:
    from citerag.index.embedded import EmbeddedBackend
    from citerag.index.retrieve import Retriever
    from citerag.service.api import create_app
    from citerag.service.settings import Settings
    from citerag.service.state import AdmissionGate, AnswererLoader, Service, WriteGuard

    stand_in.build([doc(i) for i in range(3)])
    backend = EmbeddedBackend(stand_in.store, stand_in.store.load(), lambda index: Retriever(index, stand_in.embedder),
                              stand_in.embedder, stand_in.chunker, stand_in.config)
    settings = Settings(index_dir=stand_in.store.root)
    app = create_app(settings)
    app.state.service = Service(
        backend, AnswererLoader(lambda: None), AdmissionGate(2), WriteGuard(API_KEY, "127.0.0.1"),
        app.state.metrics, 5, settings.history_max_turns, settings.history_max_chars,
    )
    test_client = TestClient(app)  # the lifespan is not run: the service above stays
    yield test_client
    test_client.close()


def test_backup_needs_the_api_key(client: TestClient, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    missing = client.post("/admin/backup", json={"dest": str(dest)})
    wrong = client.post("/admin/backup", json={"dest": str(dest)}, headers={"Authorization": "Bearer nope"})

    assert missing.status_code == 401 and wrong.status_code == 401
    assert missing.json() == {"detail": "API key missing: send 'Authorization: Bearer <CITERAG_API_KEY>'",
                              "error": "Unauthorized"}
    assert wrong.json()["detail"] == "API key wrong: send 'Authorization: Bearer <CITERAG_API_KEY>'"
    assert not dest.exists() and list(tmp_path.glob(".bk.tmp-*")) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Field required"),
        ({"dest": ""}, "String should have at least 1 character"),
        ({"dest": "relative/bk"}, "Value error, must be an absolute path on the server"),
        ({"dest": "/tmp/a\nb"}, "Value error, must not contain control characters"),
        ({"dest": "/tmp/x", "path": "/y"}, None),  # an unknown field: 422 naming it
    ],
)
def test_bad_input_is_a_422_naming_the_field(client: TestClient, body: dict, message: str | None) -> None:
    response = client.post("/admin/backup", json=body, headers=AUTH)

    assert response.status_code == 422
    [error] = response.json()["detail"]
    if message is None:
        assert error["loc"] == ["body", "path"] and error["msg"] == "Extra inputs are not permitted"
    else:
        assert error["loc"] == ["body", "dest"] and error["msg"] == message


def test_a_destination_that_exists_is_a_422_naming_dest(client: TestClient, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    response = client.post("/admin/backup", json={"dest": str(taken)}, headers=AUTH)

    assert response.status_code == 422
    assert response.json() == {"detail": [{
        "loc": ["body", "dest"], "type": "value_error",
        "msg": f"{taken}: already exists; choose a new directory (a backup never overwrites one)",
    }]}
    assert list(taken.iterdir()) == []


def test_backup_writes_a_verified_backup_of_the_live_version(
    client: TestClient, stand_in: StandInIndex, tmp_path: Path
) -> None:
    written = client.post("/documents", json=[{"id": "d9", "text": "Zorblax halves memory."}], headers=AUTH)
    assert written.status_code == 200, written.text
    live = stand_in.store.current()
    assert live is not None
    dest = tmp_path / "backups" / "bk"

    response = client.post("/admin/backup", json={"dest": str(dest)}, headers=AUTH)

    assert response.status_code == 200, response.text
    body = response.json()
    info = json.loads((dest / MANIFEST).read_text())
    assert body["dest"] == str(dest) and body["version"] == live.name == info["version"]
    assert (body["documents"], body["wal_seq"], body["wal_last"]) == (4, 1, 1)
    assert body["files"] == len(info["files"]) and body["bytes"] == sum(f["size"] for f in info["files"].values())
    assert verify_backup(dest)["created_at"] == body["created_at"]
    fresh = IndexStore(tmp_path / "fresh")
    from citerag.index.backup import restore

    restore(fresh, dest)
    assert sorted(fresh.load().documents) == ["d0", "d1", "d2", "d9"]
