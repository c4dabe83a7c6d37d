"""A job's hard wall-clock limit (Note [A job's wall-clock limit] in workers.agent.agent): a real sandboxed script
that prints a line every second and sleeps between them, so the hang watchdog never fires, is stopped by the
device agent once it has run past its limit, and fails with a reason naming the limit and where it came from.
A script that ignores SIGTERM is killed after the stop grace."""
import os
import threading
import time
from pathlib import Path

import pytest

from workers.agent import AgentSettings, DeviceAgent, JobRun
from zico_contracts.walltime import WallLimit

SCRIPTS = Path(__file__).resolve().parent / "user_scripts"
pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")


def run_script(tmp_path, job_id, argv, limit):
    agent = DeviceAgent("cpu", 1 << 30, 1 << 30, None,
                        AgentSettings(hang_timeout_s=2.5, startup_timeout_s=60, stop_grace_s=1.0))
    spec = {"kind": "script", "code_dir": str(SCRIPTS), "argv": argv, "device": "cpu",
            "output_dir": str(tmp_path / "out"), "scratch_dir": str(tmp_path / "scratch")}
    ticks, first_tick = [], threading.Event()

    def on_output(stream, line):
        if line.startswith("tick "):
            ticks.append(time.monotonic())
            first_tick.set()

    run = JobRun(job_id, spec, on_output=on_output, wall_limit=limit)
    try:
        out = agent.run(run)  # returns once the job's process has ended
        ran_s = time.monotonic() - run.launched_at
    finally:
        agent.close()
    return out, ran_s, ticks, first_tick.is_set()


def test_a_job_past_its_wall_clock_limit_is_stopped_and_fails(tmp_path):
    out, ran_s, ticks, _ = run_script(tmp_path, 910_001, ["python", "prints_and_sleeps.py"], WallLimit(3, "job"))
    assert out["status"] == "failed", out
    # not "hung": it printed every second (on a loaded host its sandbox may take most of the 3 s to start)
    assert out["reason"].splitlines()[0] == "ran past its wall-clock limit of 3 s (the job's own limit): stopped"
    assert 3 <= ran_s < 3 + 1.0 + 3.0, ran_s  # stopped at its limit, not before, and within the grace after it
    print({"ran_s": round(ran_s, 2), "lines": len(ticks)})


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    """The limit leaves room for the sandbox to start and the script to ignore SIGTERM first (a SIGTERM before
    the job's ``hello`` goes to the sandbox, which it ends)."""
    out, ran_s, ticks, ticked = run_script(tmp_path, 910_002, ["python", "prints_and_sleeps.py", "--ignore-term"],
                                           WallLimit(8, "job"))
    assert ticked, out  # it ran and printed, so it was never hung (hang timeout 2.5 s: a hang would say "hung")
    assert out["status"] == "failed", out
    assert out["reason"].splitlines()[0] == "ran past its wall-clock limit of 8 s (the job's own limit): stopped"
    assert "killed by signal SIGKILL" in out["reason"], out["reason"]
    assert 8 + 1.0 <= ran_s < 8 + 1.0 + 3.0, ran_s  # SIGKILL at the 1 s grace after SIGTERM

def test_a_tenant_limit_names_the_tenant(tmp_path):
    out, _, _, _ = run_script(tmp_path, 910_003, ["python", "prints_and_sleeps.py"], WallLimit(2, "tenant"))
    assert out["status"] == "failed", out
    assert out["reason"].startswith("ran past its wall-clock limit of 2 s (the tenant's limit): stopped")
