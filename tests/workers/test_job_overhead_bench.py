"""The job-overhead benchmark (tools.bench.job_overhead): its figures from literal rounds, a real run of its
three arms on CPU (tiny sizes; no speed is asserted: the figures are the benchmark's output), and the GPU
check's invocation of it (parsed here, since it can only run on a GPU host)."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench.overhead_report import summarize

REPO = Path(__file__).resolve().parents[2]


def rounds(step_s, cpu_fraction=1.0, wait_s=0.0, n=4, agent=False):
    """n iteration ends step_s apart; the thread on a CPU cpu_fraction of each step, waiting wait_s of it."""
    ends = [[i * step_s, int(i * step_s * cpu_fraction * 1e9), int(i * wait_s * 1e9)] for i in range(n)]
    return {"ends": ends, "process_cpu_ns": int(n * step_s * 1e9), **({"agent_cpu_ns": int(1e7)} if agent else {})}


def test_summary_keeps_the_rounds_after_the_warm_up_and_divides_the_medians():
    times = {"A": [rounds(9.0, agent=True), rounds(0.11, wait_s=0.01, agent=True), rounds(0.11, agent=True)],
             "B": [rounds(5.0), rounds(0.10), rounds(0.10)],
             "C": [rounds(7.0), rounds(0.12), rounds(0.12)]}
    s = summarize(times, warmup_rounds=1)
    assert s["rounds"] == 2
    a, b = s["arms"]["A"], s["arms"]["B"]
    assert a["steps"] == b["steps"] == 6  # 2 rounds x (4 ends - 1)
    assert a["wall"]["median_s"] == pytest.approx(0.11) and b["wall"]["median_s"] == pytest.approx(0.10)
    assert a["busy"]["round_medians_s"] == pytest.approx([0.10, 0.11])  # the wait for a CPU taken out
    assert s["A/B"]["wall"]["ratio"] == pytest.approx(1.1)
    assert s["A/C"]["wall"]["per_round_median"] == pytest.approx(0.11 / 0.12)
    assert a["agent_cpu_s_per_iteration"] == pytest.approx(0.02 / 8)
    assert s["A/B"]["cpu"]["ratio"] == pytest.approx((0.11 + 0.02 / 8) / 0.10)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_benchmark_runs_its_three_arms_on_cpu_and_prints_ratios_measured_in_the_same_run(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tools.bench.job_overhead",
                          "--job", "tiny-lm:batch_size=2,seq_len=16,data=synthetic", "--rounds", "2", "--steps", "3",
                          "--out", str(tmp_path / "overhead")], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "## tiny-lm:batch_size=2,seq_len=16,data=synthetic" in text
    assert re.search(r"^A/B: wall \d+\.\d{3}x .*\[target <= 1\.03x\]$", text, re.M), text
    assert re.search(r"^A/C: wall \d+\.\d{3}x", text, re.M), text
    report = json.loads((tmp_path / "overhead.json").read_text())
    [result] = report["results"]
    arms = result["summary"]["arms"]
    assert set(arms) == {"A", "B", "C"}
    for arm in arms.values():
        assert arm["steps"] == 2 * (3 - 1) and arm["wall"]["median_s"] > 0 and arm["process_cpu_s_per_iteration"] > 0
    assert arms["A"]["agent_cpu_s_per_iteration"] > 0  # the agent's side of arm A is counted
    assert (tmp_path / "overhead.txt").read_text().strip() == text.strip()


def test_gpu_check_runs_the_benchmark_on_cuda_with_resnet50_and_gpt2_small(tmp_path):
    from tools.bench.job_overhead import parse_args
    from tools.colocate import parse_job
    from zico_workloads.catalog import validate_params

    script = (REPO / "scripts" / "gpu-check.sh").read_text()
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu-check.sh")]).returncode == 0
    block = re.search(r"faulthandler -m tools\.bench\.job_overhead((?:[^\n]*\\\n)*[^\n]*)", script).group(1)
    words = shlex.split(re.sub(r"\$\{ZICO_GPU_BENCH_ROUNDS:-(\d+)\}", r"\1", block.replace("\\\n", " ").split(">")[0])
                        .replace("$OUT", str(tmp_path)))
    args = parse_args(words)
    assert args.device == "cuda:0" and args.rounds >= 3 and args.steps >= 3
    jobs = [parse_job(text) for text in args.job]
    assert [key for key, _ in jobs] == ["resnet50", "gpt2-small"]
    for key, params in jobs:
        validate_params(key, params)
    assert dict(jobs)["resnet50"]["batch_size"] == 64 and dict(jobs)["gpt2-small"]["seq_len"] == 1024
    limit = re.search(r"run_step job_overhead (\d+) \d+ \S+ \$PYTHON -X faulthandler -m tools\.bench\.job_overhead", script)
    assert limit and int(limit.group(1)) <= 300
