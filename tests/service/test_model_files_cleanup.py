"""What a start killed while it assembled the generator (or exported the ONNX model) left in ``cache_dir/models`` is
removed at the next start (issue 54). A GGUF split over two tiny stand-in part packages stands in for the 1.1 GB
model: the assembly, not the model, is the subject."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from citerag.service import model_files
from citerag.service.model_files import STALE_SECONDS, GGUFSpec, assemble_gguf

PARTS = [b"GGUF" + b"a" * 3000, b"b" * 2000]


@pytest.fixture()
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GGUFSpec:
    """Two part packages, ``standin_part1`` and ``standin_part2``, each holding ``data/partNN.bin``."""
    site = tmp_path / "site"
    for i, data in enumerate(PARTS, start=1):
        package = site / f"standin_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    return GGUFSpec(name="stand-in", filename="stand-in.gguf", package="standin-part{i}", module="standin_part{i}",
                    part_file="data/part{i:02d}.bin", n_parts=2, sha256=hashlib.sha256(b"".join(PARTS)).hexdigest())


def gone_pid() -> int:
    """The id of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def age(path: Path, seconds: float) -> Path:
    os.utime(path, (time.time() - seconds,) * 2)
    return path


def test_the_assembly_writes_a_recognisable_temporary_file(spec: GGUFSpec, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    renamed: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        renamed.append((Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(model_files.os, "replace", spy)
    path = assemble_gguf(spec, tmp_path / "cache")
    assert path.read_bytes() == b"".join(PARTS)
    assert renamed[0] == (f"stand-in.gguf.tmp-{os.getpid()}", "stand-in.gguf")  # then the stamp, atomically
    assert [dst for _, dst in renamed] == ["stand-in.gguf", "stand-in.sha256"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["stand-in.gguf", "stand-in.sha256"]


def test_leftovers_of_killed_starts_are_removed_at_the_next_assembly(spec: GGUFSpec, tmp_path: Path) -> None:
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    dead = gone_pid()
    killed = models / f"stand-in.gguf.tmp-{dead}"  # a start killed mid-join: its process is gone
    killed.write_bytes(b"GGUF" + b"a" * 1000)
    older = models / f"qwen2.5-coder-1.5b-instruct-q4_k_m.tmp{dead}"  # the name assemblies used before
    older.write_bytes(b"x" * 100)
    reused = models / f"other.gguf.tmp-{os.getppid()}"  # its id runs again (ids are reused), but it is too old
    reused.write_bytes(b"y" * 100)
    age(reused, STALE_SECONDS + 60)
    export = models / ".export-abc123"  # an ONNX export killed long ago
    export.mkdir()
    (export / "fp32.onnx").write_bytes(b"z" * 100)
    age(export, STALE_SECONDS + 60)
    live_export = models / ".export-def456"  # an export under way in another process
    live_export.mkdir()

    path = assemble_gguf(spec, tmp_path / "cache")
    assert path.read_bytes() == b"".join(PARTS)
    assert not killed.exists() and not older.exists() and not reused.exists() and not export.exists()
    assert sorted(p.name for p in models.iterdir()) == [".export-def456", "stand-in.gguf", "stand-in.sha256"]


def test_a_running_assemblys_temporary_file_is_kept_and_leftovers_go_even_when_the_model_is_assembled(
    spec: GGUFSpec, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path = assemble_gguf(spec, cache)  # assembled and stamped: the next start returns early
    models = path.parent
    busy = models / f"other.gguf.tmp-{os.getppid()}"  # another process joining the file right now
    busy.write_bytes(b"GGUF")
    killed = models / f"other.gguf.tmp-{gone_pid()}"
    killed.write_bytes(b"GGUF" + b"c" * 60_000)

    assert assemble_gguf(spec, cache) == path
    assert busy.exists() and not killed.exists()
    assert sorted(p.name for p in models.iterdir()) == sorted(["stand-in.gguf", "stand-in.sha256", busy.name])
