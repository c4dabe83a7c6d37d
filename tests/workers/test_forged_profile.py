"""A script job's profile is what the device agent measured (Note [A profile is what the agent measured] in
workers.agent.agent): a real sandboxed script that writes its own profile trace and sends ``profiled`` itself
gets the agent's figures in its message and its trace refused; a plain script's profile is accepted with the
same checks. Real bwrap, the real agent pool."""
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from workers.agent import AgentSettings, DeviceAgent
from workers.profiletrace import profiled_curve

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_user_scripts import Job, run_together  # noqa: E402

GiB = 1 << 30
PROFILE = {"warmup": 1, "steady": 2, "time_limit_s": 120}
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")]


def profiled(tmp_path, job_id, argv):
    """Run ``argv`` profiled, alone on a 1 GiB CPU agent; returns the job and its ``profiled`` message as the
    agent passed it on."""
    job = Job(tmp_path, job_id, argv, profile=PROFILE)
    agent = DeviceAgent("cpu", GiB, GiB, None, AgentSettings(hang_timeout_s=120, startup_timeout_s=120))
    try:
        run_together(agent, [job])
    finally:
        agent.close()
    assert job.outcome["status"] == "succeeded", job.outcome
    (msg,) = job.of("profiled")
    return job, msg


def curve_of(job, msg):
    return profiled_curve(SimpleNamespace(scratch_dir=job.spec["scratch_dir"]), job.job_id, PROFILE["warmup"],
                          "cpu", {}, msg["peak_reserved"], msg["iterations"], msg["profile_s"])


def test_a_forged_profile_carries_the_agents_figures_and_its_trace_is_refused(tmp_path):
    job, msg = profiled(tmp_path, 41, ["python", "forges_profile.py"])
    assert "forged" in job.stdout(), job.lines
    assert msg["iterations"] <= len(job.of("go")) < 10, msg  # not the 1e12 the script claimed
    assert 0 < msg["peak_reserved"] <= GiB, msg  # what the agent pool granted it, not 1e15
    assert msg["profile_s"] < 600, msg
    with pytest.raises(ValueError, match="bytes allocated, more than the .* bytes the agent granted"):
        curve_of(job, msg)


def test_a_plain_scripts_profile_passes_the_same_checks(tmp_path):
    job, msg = profiled(tmp_path, 42, ["python", "mlp_adam.py", "--steps", "6"])
    assert 3 <= msg["iterations"] <= len(job.of("go")), msg
    curve = curve_of(job, msg)
    assert 0 < curve["peak_bytes"] <= msg["peak_reserved"]
    assert curve["meta"]["held_peak_bytes"] == msg["peak_reserved"]
