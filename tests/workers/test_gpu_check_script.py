"""scripts/gpu-check.sh on a machine without a GPU: its syntax, its time budget (every step's limit and the
whole run's deadline within 8 minutes), the experiment's default pairs and budget, and a clear stop with exit
status 1 when torch sees no CUDA device."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check.sh"
EIGHT_MINUTES_S = 480


def test_every_step_has_a_limit_and_the_whole_run_fits_eight_minutes():
    text = SCRIPT.read_text()
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    steps = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"run_step (\w+) (\d+) (\d+) ", text)}
    assert set(steps) == {"build", "gpu_tests", "crash_isolation", "colocate", "curve_accuracy", "job_overhead",
                          "experiment"}
    assert all(0 < low <= limit for limit, low in steps.values())
    deadline = int(re.search(r'BUDGET_S="\$\{ZICO_GPU_CHECK_BUDGET_S:-(\d+)\}"', text)[1])
    # the deadline covers the set-up and every step; the report after it is a few seconds of Python
    assert sum(limit for limit, _ in steps.values()) <= deadline <= EIGHT_MINUTES_S - 10
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert sum("timeout " in line for line in code) == 1  # run_step's: no step runs outside the deadline
    assert f"add up to {sum(limit for limit, _ in steps.values())} s" in text  # as the header says


def test_the_experiment_step_covers_resnet50_bert_base_and_gpt2_small_below_the_sum_of_peaks():
    from tools.bench.experiment import CUDA_JOBS, parse_pairs

    text = SCRIPT.read_text()
    default = re.search(r"ZICO_GPU_EXPERIMENT_PAIRS:-([^}]+)\}", text)[1].split()
    pairs = parse_pairs(default, CUDA_JOBS)
    assert {k for p in pairs for k in p} == {"resnet50", "bert-base", "gpt2-small"}
    call = re.search(r"-m tools\.bench\.experiment --device cuda:0 \\\n\s*(.*)", text)[1]
    words = shlex.split(call.replace('"${pairs[@]}"', ""))
    at = [float(words[i + 1]) for i, w in enumerate(words) if w == "--budget-at"]
    assert at and all(0 < f <= 1 for f in at)  # below the sum of the pair's held peaks


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be visible here")
def test_without_a_gpu_it_stops_at_once_saying_so(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "torch sees no CUDA device: nothing to check" in out.stderr
    assert (tmp_path / "steps.env").read_text() == "cuda=fail\n"
    bad = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                         env={**env, "ZICO_GPU_CHECK_BUDGET_S": "8min"})
    assert bad.returncode == 2 and "ZICO_GPU_CHECK_BUDGET_S must be a whole number of seconds, got '8min'" in bad.stderr
