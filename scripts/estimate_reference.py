"""Write the estimate reference that tests/curves/test_estimate_reference.py compares against.

    PYTHONPATH=<checkout>/platform:<checkout> python scripts/estimate_reference.py OUT.json

For each case in CASES (small configurations of every catalog workload, CUDA and CPU targets), the
curve ``estimate_curve`` computes with the code on PYTHONPATH: peak and persistent bytes, the bytes
array, and for a CUDA target (a deterministic datasheet clock) the fractions and iteration time too.
Run it with an older checkout on PYTHONPATH to record what that code computes; the test then holds
the current code to it. The torch and transformers versions are recorded: other versions dispatch
other operators, and the test skips rather than compare across them.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import tempfile

# (workload, params, device, timing); small enough to run in a test in seconds.
CASES: list[tuple[str, dict, str, str]] = [
    ("digits-cnn", {"batch_size": 8}, "cuda:0", "measured"),
    ("digits-cnn", {"batch_size": 8}, "cpu", "roofline"),
    ("resnet18", {"batch_size": 2, "image_size": 32}, "cuda:0", "measured"),
    ("resnet50", {"batch_size": 2, "image_size": 32}, "cuda:0", "measured"),
    ("resnet50", {"batch_size": 2, "image_size": 32, "precision": "bf16"}, "cuda:0", "measured"),
    ("tiny-lm", {"batch_size": 2, "seq_len": 32}, "cuda:0", "measured"),
    ("tiny-lm", {"batch_size": 2, "seq_len": 32}, "cpu", "roofline"),
    ("tiny-lm", {"batch_size": 2, "seq_len": 32, "precision": "bf16", "optimizer": "sgd"}, "cuda:0", "measured"),
    ("gpt2-small", {"batch_size": 1, "seq_len": 64}, "cuda:0", "measured"),
    ("bert-base", {"batch_size": 1, "seq_len": 32, "data": "synthetic"}, "cuda:0", "measured"),
]


def case_id(case: tuple[str, dict, str, str]) -> str:
    key, params, device, timing = case
    return f"{key} {json.dumps(params, sort_keys=True)} {device} {timing}"


def versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in ("torch", "transformers")}


def digest(values) -> str:
    """SHA-256 of an array's float64 values (exact: one changed bit changes it)."""
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()


def compute(case: tuple[str, dict, str, str], data_dir: str) -> dict:
    """The figures of one case's estimate (what the test compares)."""
    try:
        from zico_workloads.curves.estimate import estimate_curve
    except ImportError:  # a checkout from before the catalog moved to zico_workloads (e.g. the reference's bc75623)
        from workers.curves.estimate import estimate_curve

    key, params, device, timing = case
    curve = estimate_curve(key, params, device, data_dir, timing=timing)
    out = {"peak_bytes": float(curve.peak_bytes), "persistent_bytes": float(curve.persistent_bytes),
           "points": len(curve.bytes), "bytes_sha256": digest(curve.bytes)}
    if device.startswith("cuda"):
        out.update(fractions_sha256=digest(curve.fractions), iteration_s=curve.iteration_s)
    return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as data_dir:
        cases = {case_id(c): compute(c, data_dir) for c in CASES}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump({"versions": versions(), "cases": cases}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
