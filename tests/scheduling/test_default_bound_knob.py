"""The default bound of a script profiled beside other jobs (zico_contracts.jobbudget): its knob,
ZICO_JOB_DEFAULT_BUDGET_FRACTION, read once for the web side (a bad value names the variable), and the bound worked
out from the device's budget and its jobs' peaks, in whole 2 MiB chunks and never under the budget floor."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zico_contracts import jobbudget

MiB, GiB = 1 << 20, 1 << 30
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw, value", [(None, 0.5), ("", 0.5), ("0", 0.0), ("0.25", 0.25), ("1", 1.0)])
def test_the_knob_is_a_fraction_of_the_device_budget(raw, value):
    assert jobbudget.fraction(raw) == value


@pytest.mark.parametrize("raw", ["-0.1", "1.5", "half", "nan", "inf"])
def test_a_bad_knob_names_the_variable_and_the_value(raw):
    with pytest.raises(jobbudget.BudgetKnobError, match=f"ZICO_JOB_DEFAULT_BUDGET_FRACTION={raw!r}: expected"):
        jobbudget.fraction(raw)


def test_the_web_side_refuses_to_start_with_a_bad_knob():
    env = {**os.environ, "ZICO_JOB_DEFAULT_BUDGET_FRACTION": "2", "DJANGO_SETTINGS_MODULE": "zico.settings"}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT / "platform", env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "ZICO_JOB_DEFAULT_BUDGET_FRACTION='2': expected a fraction" in out.stderr, out.stderr


def test_the_bound_is_the_least_of_the_share_and_what_the_peaks_leave():
    assert jobbudget.default_bound(16 * GiB, 4 * GiB, 0.5, 64 * MiB) == 8 * GiB  # the share
    assert jobbudget.default_bound(16 * GiB, 10 * GiB, 0.5, 64 * MiB) == 6 * GiB  # what is left
    assert jobbudget.default_bound(323 * MiB, 40 * MiB, 0.5, 64 * MiB) == 160 * MiB  # 161.5 MiB, whole chunks
    assert jobbudget.default_bound(16 * GiB, 16 * GiB - 32 * MiB, 0.5, 64 * MiB) is None  # under the floor
    assert jobbudget.default_bound(16 * GiB, 0, 0.0, 64 * MiB) is None  # the knob at 0: off


def test_a_stop_at_the_bound_is_a_failure_after_a_refusal_for_it():
    assert jobbudget.stopped_at_bound("failed", {"job_budget_refusals": 1})
    assert not jobbudget.stopped_at_bound("failed", {})
    assert not jobbudget.stopped_at_bound("succeeded", {"job_budget_refusals": 3})  # it caught the error and went on
    assert not jobbudget.stopped_at_bound("failed", {"job_budget_refusals": True})
