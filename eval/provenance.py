"""Where a measurement comes from: the commit, the machine and the date, as every row of ``eval/results/LATEST.md``
and every section of ``bench/RESULTS.md`` names them."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
from functools import lru_cache
from pathlib import Path

from citerag.service.settings import PROJECT_ROOT

#: The CPU flags that change llama.cpp's and FAISS's kernels, so that two machines' figures can be told apart.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


@lru_cache(maxsize=1)
def machine() -> str:
    """This machine in a few words: CPU model, cores and the widest vector flags (``AMD EPYC, 2 cores, avx2
    avx512f avx512_vnni``); read from ``/proc/cpuinfo`` (``unknown CPU`` where it is absent)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    present = " ".join(flag for flag in KERNEL_FLAGS if flag in flags) or "no AVX2"
    return f"{model}, {os.cpu_count()} cores, {present}"


#: What the code of a measurement is: a change elsewhere (the results themselves, the docs) is no other code.
CODE_PATHS = ("service", "index", "library", "eval/*.py", "pyproject.toml")


def commit(root: Path = PROJECT_ROOT) -> str:
    """The checked-out commit, short, with ``+changes`` when the code (:data:`CODE_PATHS`) differs from it
    (``unknown`` outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if dirty else head


def today() -> str:
    """Today's date (UTC), ISO format."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()
