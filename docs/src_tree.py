"""Lay the ``citerag`` namespace out as one folder tree of links, for tools that read source by path (mkdocstrings'
griffe, mypy): the repository maps ``citerag`` to ``library/`` and ``citerag.index`` / ``citerag.service`` /
``citerag.eval`` to ``index/`` / ``service/`` / ``eval/`` (``pyproject.toml``), which only the installed package's
import hook knows.

    python docs/src_tree.py build/src      # build/src/citerag/{__init__.py, errors.py, index, service, eval}
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Subpackage -> the repository folder it lives in.
FOLDERS = {"index": "index", "service": "service", "eval": "eval"}


def src_tree(out: Path) -> Path:
    """Make ``out/citerag`` (replacing it): links to ``library/``'s files and to the subpackages' folders; returns
    ``out`` (the folder to put on a tool's search path)."""
    package = out / "citerag"
    if package.exists() or package.is_symlink():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for path in (ROOT / "library").iterdir():
        (package / path.name).symlink_to(path)
    for name, folder in FOLDERS.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    return out


if __name__ == "__main__":
    src_tree(Path(sys.argv[1] if len(sys.argv) > 1 else "build/src"))
