"""A catalog job's spec as a device worker runs it (the catalog project under the job process entry, in its
sandbox), through ``tests/workers/faulty_project/faulty_train.py`` with a fault injected at iteration 2 or none;
for the agent's crash, greedy-neighbour and GPU crash tests (imported as ``faults``)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

FAULTY_PROJECT = Path(__file__).resolve().parents[1] / "workers" / "faulty_project"
_dirs = itertools.count()


def faulty_spec(tmp_path: Path, workload: str, params: dict[str, Any], fault: str = "none",
                budget_bytes: int | None = None, device: str = "cpu") -> dict[str, Any]:
    """The script spec of catalog job ``workload`` with ``params`` and ``fault`` (``none``: it trains); its data,
    output and scratch directories under ``tmp_path`` (each spec its own output and scratch)."""
    n = next(_dirs)
    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    argv = ["python", "faulty_train.py", "--fault", fault]
    if budget_bytes:
        argv += ["--budget-bytes", str(budget_bytes)]
    argv += ["--workload", workload, "--params", json.dumps(params)]
    return {"kind": "script", "code_dir": str(FAULTY_PROJECT), "argv": argv, "device": device,
            "data_dir": str(tmp_path / "data"), "output_dir": str(tmp_path / f"out-{n}"),
            "scratch_dir": str(tmp_path / f"scratch-{n}")}
