"""``python -m tools.colocate``: bad input is refused before anything runs (one line, exit 2, no
traceback, no report written), the markdown report says which budget applied, and a run that did not show
sharing (budget not below the sum of the solo peaks, no bytes moved between the processes) exits 1 saying why."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.colocate import markdown, verdict

ROOT = Path(__file__).resolve().parents[2]


def _colocate(args: list[str], out: Path | str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("platform", ".", "allocator/python"))}
    return subprocess.run([sys.executable, "-m", "tools.colocate", *args, "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


BAD = [
    (["--job", "nosuch"], "job 'nosuch': unknown workload 'nosuch'"),
    (["--job", "digits-cnn:batch_size=-1"], "batch_size: must be >= 1, got -1"),
    (["--job", "digits-cnn:foo=1"], "foo: unknown parameter for digits-cnn"),
    (["--job", "digits-cnn:batch_size=abc"], "batch_size: expected an integer"),
    (["--job", "tiny-lm:corpus=/etc/passwd"], "corpus: must be a relative path"),
    (["--job", "tiny-lm"], "needs --data-dir"),
    (["--job", "digits-cnn:iterations=3"], "use --iterations"),
    (["--job", ":batch_size=4"], "missing the workload key"),
    (["--job", "digits-cnn:batch_size"], "expected name=value, got 'batch_size'"),
    (["--job", "digits-cnn", "--budget-fraction", "0"], "--budget-fraction must be a number in (0, 1], got 0"),
    (["--job", "digits-cnn", "--budget-fraction", "-1"], "--budget-fraction must be a number in (0, 1], got -1"),
    (["--job", "digits-cnn", "--budget-fraction", "nan"], "--budget-fraction must be a number in (0, 1], got nan"),
    (["--job", "digits-cnn", "--budget-fraction", "inf"], "--budget-fraction must be a number in (0, 1], got inf"),
    (["--job", "digits-cnn", "--budget-fraction", "5"], "--budget-fraction must be a number in (0, 1], got 5"),
    (["--job", "digits-cnn", "--device", "tpu"], "--device must be cpu or cuda[:N], got 'tpu'"),
    (["--job", "digits-cnn", "--iterations", "0"], "--iterations must be an integer >= 1, got 0"),
    (["--job", "digits-cnn", "--capacity", "lots"], "--capacity: not a byte size"),
    (["--job", "digits-cnn", "--device", "cuda", "--capacity", "1GiB"], "--capacity applies to --device cpu only"),
    (["--job", "digits-cnn", "--capacity", "inf"], "--capacity: byte size too large: 'inf'"),
    (["--job", "digits-cnn", "--capacity", "1e30"], "--capacity: byte size too large: '1e30'"),
    (["--job", "digits-cnn", "--threads", "-1"], "--threads must be an integer >= 0, got -1"),
]


def _assert_refused(proc: subprocess.CompletedProcess, expected: str, out: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("colocate: ") and expected in lines[0], lines[0]
    assert proc.stdout == ""
    assert not out.with_suffix(".json").exists() and not out.with_suffix(".md").exists()
    assert list(out.parent.iterdir()) == []  # nothing written


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_refused_in_one_line(tmp_path, args, expected):
    out = tmp_path / "colocate"
    _assert_refused(_colocate(args, out), expected, out)


def test_a_capacity_too_small_for_a_job_is_named(tmp_path):
    """Only found out while the first job is profiled alone: still one line naming --capacity, exit 2."""
    out = tmp_path / "colocate"
    proc = _colocate(["--job", "digits-cnn:data=synthetic", "--capacity", "1KiB", "--iterations", "1"], out)
    _assert_refused(proc, "--capacity 1024 bytes is too small", out)


def _report(budget_source: str) -> dict:
    mib = 2**20
    jobs = [
        {"workload": "digits-cnn", "params": {}, "peak_bytes": int(3.5 * mib), "persistent_bytes": mib,
         "iteration_s": 0.004, "peak_reserved_bytes_solo": 4 * mib, "iterations": 5, "seconds": 0.35,
         "iterations_per_s": 14.3, "delay_s": 0.30, "gate_waits": 5, "peak_allocated_bytes": int(3.5 * mib),
         "peak_reserved_bytes": 4 * mib, "loss": 2.24, "solo_iterations_per_s": 250.0, "throughput_vs_solo": 0.06},
        {"workload": "tiny-lm", "params": {}, "peak_bytes": int(46.2 * mib), "persistent_bytes": 2 * mib,
         "iteration_s": 0.04, "peak_reserved_bytes_solo": 66 * mib, "iterations": 5, "seconds": 0.3,
         "iterations_per_s": 16.7, "delay_s": 0.0, "gate_waits": 0, "peak_allocated_bytes": int(46.2 * mib),
         "peak_reserved_bytes": 66 * mib, "loss": 3.91, "solo_iterations_per_s": 25.0, "throughput_vs_solo": 0.67},
    ]
    solo_sum = sum(j["peak_bytes"] for j in jobs)
    fraction_budget = int(0.8 * solo_sum)
    floor = int(81.6 * mib) if budget_source == "feasible_floor" else int(30 * mib)
    return {"device": "cpu", "torch": "2.x", "iterations": 5, "budget_bytes": max(fraction_budget, floor),
            "budget_fraction": 0.8, "minimal_feasible_budget_bytes": floor, "fraction_budget_bytes": fraction_budget,
            "budget_source": budget_source, "sum_solo_peaks_bytes": solo_sum,
            "sum_solo_reserved_peaks_bytes": 70 * mib, "reserved_before_bytes": 0,
            "pool_peak_reserved_bytes": 35 * mib, "pool_peak_allocated_bytes": 30 * mib, "wall_s": 0.4, "errors": [],
            "delays": {"count": 0, "total_ms": 0}, "gate_waits": {"count": 5, "total_s": 0.30}, "jobs": jobs,
            "peak_within_budget": True, "peak_vs_sum_of_solo_peaks": 35 / 49.7,
            "peak_vs_sum_of_solo_reserved_peaks": 0.5}


def test_markdown_names_the_floor_when_it_set_the_budget():
    text = markdown(_report("feasible_floor"))
    assert "- budget: 81.6 MiB (the feasible floor; 0.80 x sum of solo peaks (49.7 MiB) would be 39.8 MiB)" in text
    assert "= 0.80 x sum of solo peaks" not in text
    assert "0.50 x sum of solo reserved peaks (70.0 MiB)" in text
    # the gate waits agree with the delay column; the coordinator's own records are labelled as such
    assert "waited at the gate: 0.30 s in all, 5 iteration(s)" in text
    assert "coordinator delay records: 0 (0.00 s)" in text


def test_markdown_names_the_fraction_when_it_set_the_budget():
    text = markdown(_report("fraction"))
    assert "- budget: 39.8 MiB = 0.80 x sum of solo peaks (49.7 MiB); feasible floor 30.0 MiB" in text


@pytest.mark.parametrize("where", ["empty", "a-folder", "trailing-slash"])
def test_an_out_that_is_not_a_path_prefix_is_refused_before_running(tmp_path, where):
    text = {"empty": "", "a-folder": str(tmp_path), "trailing-slash": str(tmp_path / "new") + os.sep}[where]
    proc = _colocate(["--job", "digits-cnn"], text)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("colocate: --out ") and "path prefix" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a folder


def test_an_out_in_a_folder_that_does_not_exist_is_refused_and_no_folder_is_made(tmp_path):
    out = tmp_path / "nonexistent" / "dir" / "x"
    _assert_refused(_colocate(["--job", "digits-cnn"], out), f"no such folder {str(out.parent)!r}", tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def _shown_report(**changes) -> dict:
    report = {**_report("fraction"), "transfer_bytes": 24 << 20, "transfers": 12, "agent_pid": 100}
    report["jobs"] = [{**j, "status": "succeeded", "pid": 101 + n} for n, j in enumerate(report["jobs"])]
    report.update(changes)
    return report


def test_the_verdict_names_each_thing_the_run_did_not_show():
    assert verdict(_shown_report()) == []
    mib = 2**20
    problems = verdict(_shown_report(budget_bytes=70 * mib, transfer_bytes=0, pool_peak_reserved_bytes=71 * mib))
    assert len(problems) == 3, problems
    assert "exceeded the budget (70.0 MiB)" in problems[0]
    assert "the budget (70.0 MiB, fraction) is not below the sum of the jobs' solo reserved peaks (70.0 MiB)" in problems[1]
    assert "no bytes moved between the job processes: no chunk one job process returned went to another" in problems[2]
    assert "each job process had a pool of its own" in verdict(_shown_report(transfer_bytes=None))[0]
    failed = _shown_report()
    failed["jobs"][1] = {**failed["jobs"][1], "status": "failed", "reason": "killed by signal SIGSEGV"}
    assert verdict(failed) == ["job 2 (tiny-lm) ended failed: killed by signal SIGSEGV"]
    assert "Not shown (exit status 1):" in markdown({**failed, "problems": verdict(failed)})


@pytest.mark.parametrize("problem", ["none", "not-below", "no-transfers"])
def test_colocate_exits_non_zero_and_says_why_when_the_run_did_not_show_sharing(tmp_path, monkeypatch, capsys, problem):
    """main's exit status and stderr for a report (run() itself is exercised by test_colocate_report.py)."""
    import tools.colocate as colocate

    report = _shown_report(**{"none": {}, "not-below": {"budget_bytes": 80 << 20},
                              "no-transfers": {"transfer_bytes": 0, "transfers": 0}}[problem])
    report["problems"] = verdict(report)
    monkeypatch.setattr(colocate, "run", lambda *a, **k: report)
    rc = colocate.main(["--job", "digits-cnn", "--job", "tiny-lm:data=synthetic", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    if problem == "none":
        assert rc == 0 and err == ""
    else:
        assert rc == 1
        assert {"not-below": "is not below the sum of the jobs' solo reserved peaks",
                "no-transfers": "no bytes moved between the job processes"}[problem] in err
        assert err.startswith("colocate: ")
    assert json.loads((tmp_path / "r.json").read_text())["problems"] == report["problems"]
