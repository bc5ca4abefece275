"""Re-quantise the shipped generator GGUF into another weight format with the ``gguf`` package, for
``bench.generator_speed`` (``--variant none:model=PATH``).

    python -m bench.requantize q4_0        # -> <cache_dir>/models/qwen2.5-coder-1.5b-instruct-q4_0-from-q4_k_m.gguf

Every 2-D weight stored as Q4_K, Q5_K or Q6_K is dequantised and quantised again to the target type (the token
embedding and output matrix to Q8_0); the rest is copied. Made from the shipped file, never committed: the result
sits in the cache directory with a ``.json`` stamp holding the source's and its own sha256. ``gguf`` can quantise
to Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (not IQ4_NL: its ``quantize_blocks`` is not implemented).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from citerag.index.files import atomic_write_text, sha256_file

TARGETS = ("q4_0", "q4_1", "q5_0", "q8_0")
RECIPE = 1


def requantize(source: Path, target: Path, kind: str) -> dict[str, object]:
    """Write ``source`` re-quantised to ``kind`` as ``target`` and its stamp; returns the stamp."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    wanted = getattr(Q, kind.upper())
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = target.with_suffix(".tmp")
    writer = gguf.GGUFWriter(tmp, arch=arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        if f.name == "general.file_type":
            continue
        kind_of = f.types[0]
        sub = f.types[-1] if kind_of == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), kind_of, sub_type=sub)
    writer.add_file_type({Q.Q4_0: 2, Q.Q4_1: 3, Q.Q8_0: 7, Q.Q5_0: 8}.get(wanted, 0))
    started = time.perf_counter()
    for t in reader.tensors:
        data, qtype = t.data, t.tensor_type
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K) and len(t.shape) == 2:
            new_type = Q.Q8_0 if t.name in ("token_embd.weight", "output.weight") else wanted
            values = gguf.dequantize(data, qtype).astype(np.float32)
            data, qtype = gguf.quantize(values, new_type), new_type
        writer.add_tensor(t.name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(target)
    stamp = {"recipe": RECIPE, "kind": kind, "source": str(source), "source_sha256": sha256_file(source),
             "sha256": sha256_file(target), "seconds": round(time.perf_counter() - started, 1)}
    atomic_write_text(target.with_suffix(".json"), json.dumps(stamp, indent=2) + "\n")
    return stamp


def main() -> None:
    from citerag.service.pipeline import generator_path
    from citerag.service.settings import Settings

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=TARGETS)
    args = p.parse_args()
    settings = Settings()
    source = generator_path(settings)
    target = source.with_name(source.stem.replace("q4_k_m", f"{args.kind}-from-q4_k_m") + ".gguf")
    stamp_path = target.with_suffix(".json")
    if target.is_file() and stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text())
        if stamp.get("recipe") == RECIPE and stamp.get("sha256") == sha256_file(target):
            print(target, "(already made)", stamp)
            return
    print(target, requantize(source, target, args.kind))


if __name__ == "__main__":
    main()
