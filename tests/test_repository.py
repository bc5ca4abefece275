"""The repository a newcomer reads: a short README, one place for current results, a documentation site that builds
strictly, code whose docstrings state contracts rather than measurements, and a type check that passes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
RESULTS = ROOT / "eval" / "results"


def _docs_module(name: str):  # noqa: ANN202 - a module of docs/
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220
    assert [i for i, line in enumerate(lines, start=1) if len(line) > 120] == []
    commands = [line for line in lines[:6] if line.startswith("make ")]
    assert [c.split()[:2] for c in commands] == [["make", "serve"], ["make", "test"]]


def test_code_carries_no_measurements_rounds_or_evaluation_questions() -> None:
    """A measurement, a round or an evaluation question id belongs in the docs or in LATEST.md, not in the code."""
    pattern = re.compile(r"\b(q|s|ml|m|f|g|w|d|i)[0-9]{3}\b|qa\.md|RESULTS\.md")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for folder in ("service", "index") for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if pattern.search(line)]
    assert found == []


def test_results_live_in_one_place() -> None:
    """eval/results/ holds LATEST.md, HISTORY.md and at most one JSON per evaluation set."""
    from citerag.eval.sets import SETS

    names = {path.name for path in RESULTS.iterdir()}
    sets = {f"{name}.json" for name in SETS} | {"retrieval.json"}
    assert {"LATEST.md", "HISTORY.md"} <= names and names - {"LATEST.md", "HISTORY.md"} <= sets, names
    for name in names - {"LATEST.md", "HISTORY.md"}:
        data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        rows = data["rows"].values()
        assert rows and all({"commit", "machine", "date", "summary"} <= row.keys() for row in rows)


def test_latest_is_generated_from_the_set_files() -> None:
    from citerag.eval.latest import latest_markdown

    assert (RESULTS / "LATEST.md").read_text(encoding="utf-8") == latest_markdown(RESULTS)


def test_each_bench_has_one_section_in_its_results() -> None:
    titles = re.findall(r"(?m)^## (.+)$", (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8"))
    assert titles and len(titles) == len(set(titles))


def test_the_configuration_page_lists_every_setting() -> None:
    from citerag.service.settings import Settings

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == _docs_module("gen_configuration").page(), "run `python docs/gen_configuration.py`"
    listed = re.findall(r"^\| `CITERAG_(\w+)` \|", page, re.MULTILINE)
    assert [name.lower() for name in listed] == list(Settings.model_fields)


def test_doctest_examples_are_fenced_for_the_api_reference() -> None:
    fenced = _docs_module("doctest_fences").fenced("Intro.\n\n    >>> f()\n    [1][2]\n\nEnd.")
    assert fenced == "Intro.\n\n    ```pycon\n    >>> f()\n    [1][2]\n    ```\n\nEnd."


@pytest.mark.slow
def test_the_documentation_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link, a missing page or an API page that does not resolve fails the build."""
    _docs_module("src_tree").src_tree(ROOT / "build" / "src")
    out = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_the_type_check_passes(tmp_path: Path) -> None:
    """mypy (config in pyproject.toml) over service/ and index/, read as the citerag namespace."""
    tree = _docs_module("src_tree").src_tree(tmp_path)
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "citerag/service", "citerag/index"], cwd=tree, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:]
