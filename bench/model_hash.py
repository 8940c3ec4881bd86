"""What checking the ONNX export's SHA-256 at each load costs a small run:
hashing model.onnx, and the check by the file's identity that a load does
when nothing wrote the file since its last hash, against the load a small
run pays anyway (the onnxruntime session and the tokenizer), in the same run.

    python bench/model_hash.py
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_name, median_time

from mdindex.config import DEFAULT_MODEL, load_settings
from mdindex.embedding import onnx_export
from mdindex.embedding.engines import OnnxRunner
from mdindex.embedding.model import load_tokenizer, resolve_model


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    info = resolve_model(DEFAULT_MODEL)
    found = onnx_export.find_export(info, load_settings({}).cache_dir)
    if found is None:
        sys.exit("no ONNX export yet: run `mdindex backfill` once first")
    size = found.path.stat().st_size
    hashed, _ = median_time(lambda: hashlib.sha256(found.path.read_bytes()).hexdigest(), runs=5)
    tokenizer, _ = median_time(lambda: load_tokenizer(info), runs=3)
    unchecked, _ = median_time(lambda: OnnxRunner(found.path, found.inputs), runs=5)
    onnx_export.open_export(found)  # hashes once if needed, and records the file's identity
    checked = onnx_export.find_export(info, load_settings({}).cache_dir)
    assert checked is not None and checked.identity
    fast, _ = median_time(lambda: onnx_export.open_export(checked), runs=5)
    print(f"CPU: {cpu_name()}")
    print(f"model.onnx: {size / 1e6:.1f} MB; read + SHA-256: {hashed * 1000:.0f} ms")
    base = unchecked + tokenizer
    print(f"a small run's load, unchecked (session + tokenizer): {base * 1000:.0f} ms")
    print(f"  with the hash in line, as after a write: {(base + hashed) / base:.2f}x")
    print(f"  checked by identity (inode, size, mtime, ctime): {(fast + tokenizer) / base:.2f}x")


if __name__ == "__main__":
    main()
