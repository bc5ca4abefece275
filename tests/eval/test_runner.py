"""The evaluation runner's entry points (``citerag eval``, ``python -m citerag.eval``) and the direction of the
imports between the packages: index/ imports nothing of service/ or eval/, service/ nothing of eval/, and none of
them the top-level ``citerag`` package (library/, the Python API's re-exports)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT


def _imported(folder: Path) -> dict[str, set[str]]:
    """The ``citerag.*`` modules each Python file under ``folder`` imports (at any depth of the file)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[str(path.relative_to(ROOT))] = {n for n in names if n == "citerag" or n.startswith("citerag.")}
    return found


@pytest.mark.parametrize(("folder", "forbidden"), [("index", ("citerag.service", "citerag.eval")),
                                                   ("service", ("citerag.eval",))])
def test_imports_point_one_way(folder: str, forbidden: tuple[str, ...]) -> None:
    wrong = {path: sorted(n for n in names if n.startswith(forbidden))
             for path, names in _imported(ROOT / folder).items()}
    assert {path: names for path, names in wrong.items() if names} == {}


@pytest.mark.parametrize("folder", ["index", "service", "eval"])
def test_no_package_imports_the_top_level_one(folder: str) -> None:
    """``citerag`` (library/) re-exports the Python API of citerag.service; the packages below never import it."""
    top = {path: sorted(n for n in names if n.split(".")[:2] == ["citerag"] or n.split(".")[1] not in
                        ("index", "service", "eval"))
           for path, names in _imported(ROOT / folder).items()}
    assert {path: names for path, names in top.items() if names} == {}


def test_citerag_eval_is_the_eval_packages_command(tmp_path: Path) -> None:
    """``citerag eval`` comes from citerag.eval.cli (entry point ``citerag.commands``) with the CLI's one-line
    errors."""
    from citerag.service.cli import app

    result = CliRunner().invoke(app, ["eval", "--devset", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'none.jsonl'}: dev set not found"


def test_python_m_citerag_eval_runs_the_same_command(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsonl"
    done = subprocess.run([sys.executable, "-m", "citerag.eval", "--devset", str(missing), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: {missing}: dev set not found"
