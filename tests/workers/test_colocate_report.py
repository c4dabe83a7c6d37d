"""``python -m tools.colocate`` for real: two training jobs, each its own process, share one pool below the sum
of their solo reserved peaks; the JSON report keeps its keys and names each job's own process and status."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
LM = "tiny-lm:batch_size=8,seq_len=64,data=synthetic"  # ~26 MiB allocated at its peak, ~5 MiB persistent


def test_the_json_report_names_each_job_process_its_status_and_the_bytes_moved_between_them(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("platform", ".", "allocator/python"))}
    out = tmp_path / "colocate"
    proc = subprocess.Popen([sys.executable, "-m", "tools.colocate", "--job", LM, "--job", LM, "--iterations", "8",
                             "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stdout, stderr = proc.communicate(timeout=900)
    assert out.with_suffix(".json").exists(), stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    for key in ("pool_peak_reserved_bytes", "budget_bytes", "jobs", "sum_solo_reserved_peaks_bytes",
                "transfer_bytes", "transfers", "problems", "deadlock_grants", "capacity_bytes"):
        assert key in report, key
    assert report["errors"] == []
    # below the sum of the solo reserved peaks, within the budget, or past it only by the agent's counted deadlock
    # grants (rule 4 in allocator/src/agent_server.cpp: a waiter beside a neighbour held at its gate that has
    # returned what it can), never past the capacity; colocate then names the overrun and exits 1. Known: at this
    # budget, 0.3 % above the pair's floor, about one run in five gets 1-2 grants and 2.5 MiB past 41.5 MiB
    assert report["budget_bytes"] < report["sum_solo_reserved_peaks_bytes"]
    overrun = [p for p in report["problems"] if "exceeded the budget" in p]
    assert report["problems"] == overrun, report["problems"]
    assert proc.returncode == (1 if overrun else 0), (report["problems"], stderr[-3000:])
    if overrun:
        assert report["deadlock_grants"] > 0 and report["pool_peak_reserved_bytes"] <= report["capacity_bytes"]
    else:
        assert report["pool_peak_reserved_bytes"] <= report["budget_bytes"]
    # each job: its own process (not colocate's, which holds the agent), and its status
    assert report["agent_pid"] == proc.pid
    # the job processes are a device worker's: the job process entry running the catalog project
    from workers.agent import AgentSettings
    from workers.agent.sandbox import CATALOG_PROJECT

    assert report["job_process"] == AgentSettings().script_module == "workers.job.entry"
    assert report["catalog_project"] == str(CATALOG_PROJECT)
    pids = [j["pid"] for j in report["jobs"]]
    assert all(isinstance(p, int) and p > 0 for p in pids) and len(set(pids)) == 2 and proc.pid not in pids
    assert [j["status"] for j in report["jobs"]] == ["succeeded", "succeeded"]
    # reuse across processes: chunks one job process returned, later granted to the other
    assert report["transfers"] > 0 and report["transfer_bytes"] >= report["transfers"] * (2 << 20)
    assert ("Not shown (exit status 1):" if overrun else "Shown: both jobs finished") in stdout
