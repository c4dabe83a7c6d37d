"""A CPU device's cores divided among its slots (zico_contracts.cpushare, workers.agent.slots): the rule, and real
sandboxed job processes that see their slot's threads and cores, a job's own thread setting kept and reported."""
import json
import os
import threading

import pytest

from workers.agent import AgentSettings, DeviceAgent
from workers.agent.slots import CpuSlots
from zico_contracts import cpushare

from .test_user_scripts import Job, run_together


def test_cores_are_divided_among_slots_and_shared_by_all_when_uneven():
    two = [cpushare.slot_share([0, 1], 2, i) for i in range(2)]
    assert [(s.cpus, s.threads) for s in two] == [((0,), 1), ((1,), 1)]
    assert cpushare.slot_share([0, 1], 1, 0).cpus == (0, 1) and cpushare.slot_share([0, 1], 1, 0).threads == 2
    assert [cpushare.slot_share([4, 5, 6, 7], 2, i).cpus for i in range(2)] == [(4, 5), (6, 7)]
    assert [cpushare.slot_share([0], 3, i).cpus for i in range(3)] == [(0,), (0,), (0,)]  # more slots than cores
    # uneven: no job alone on a core beside two sharing one; all share both, one thread each
    assert [(s.cpus, s.threads) for s in (cpushare.slot_share([0, 1], 3, i) for i in range(3))] == [((0, 1), 1)] * 3
    assert [(s.cpus, s.threads) for s in (cpushare.slot_share(range(4), 3, i) for i in range(3))] == [((0, 1, 2, 3), 1)] * 3
    assert [cpushare.slot_share(range(6), 3, i).cpus for i in range(3)] == [(0, 1), (2, 3), (4, 5)]
    for args, field in [(([], 2, 0), "cpus"), (([0], 0, 0), "slots"), (([0], 2, 2), "slot"), (([0], True, 0), "slots")]:
        with pytest.raises(ValueError, match=f"^{field}: "):
            cpushare.slot_share(*args)


def test_a_job_takes_the_lowest_free_slot_and_frees_it_at_its_end():
    slots = CpuSlots(2, {0, 1})
    assert slots.take(1).slot == 0 and slots.take(2).slot == 1
    slots.free(1)
    assert slots.take(3).slot == 0
    assert slots.per_job() == {"cores": 2, "slots": 2, "threads": 1}


def test_a_user_setting_is_kept_and_named():
    env, _ = cpushare.job_environment(cpushare.slot_share([0, 1], 2, 1), {"WANDB_MODE": "offline"})
    assert env == {cpushare.CPUS_ENV: "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env, share = cpushare.job_environment(cpushare.slot_share([0, 1], 2, 1), {"OMP_NUM_THREADS": "3"})
    assert env == {cpushare.CPUS_ENV: "1"}  # the job's own thread setting is whole: MKL's would cap OpenMP's
    assert share.user_set == ("OMP_NUM_THREADS",)
    assert cpushare.describe(share.to_dict(), {"OMP_NUM_THREADS": "3"}) == (
        "1 of 2 cores (CPU 1), 1 thread (slot 2 of 2); the job's own OMP_NUM_THREADS=3 kept instead of 1")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")
def test_co_located_script_jobs_run_on_their_slots_cores_with_their_slots_threads(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    agent = DeviceAgent("cpu", 1 << 30, 1 << 30, None, AgentSettings(hang_timeout_s=120, startup_timeout_s=120),
                        slots=2)
    first = Job(tmp_path, 71, ["python", "reports_threads.py"])
    own = Job(tmp_path, 72, ["python", "reports_threads.py"], env={"OMP_NUM_THREADS": "3"})
    started = threading.Event()  # the second starts once the first holds slot 1 (its log line is written at launch)
    first._line = lambda stream, line: (first.lines.append((stream, line)), started.set())
    try:
        run_together(agent, [first, own], after={72: started})
    finally:
        agent.close()
    seen = {j.job_id: json.loads(next(l for l in j.stdout() if l.startswith("SHARE "))[6:]) for j in (first, own)}
    k = max(1, len(cpus) // 2)
    for job in (first, own):
        assert job.outcome["status"] == "succeeded", job.outcome
        share = job.outcome["metrics"][cpushare.METRIC]
        assert seen[job.job_id]["affinity"] == share["cpus"] and len(share["cpus"]) == k, (seen, share)
        assert any(l.startswith("this job's share of the CPU device: ") for s, l in job.lines if s == "system")
    assert seen[71] == {"torch_threads": k, "affinity": seen[71]["affinity"], "omp": str(k), "mkl": str(k)}
    assert seen[72]["omp"] == "3" and seen[72]["mkl"] is None, seen  # the job's own setting, whole
    # torch takes it, up to the cores it finds: under the affinity lock (Note [A job keeps its CPU slot] in
    # workers.agent.seccomp) its CPU probe cannot step onto other cores and finds its slot's, else the host's
    from workers.agent import seccomp

    cores = len(seen[72]["affinity"]) if seccomp.affinity_filter() is not None else (os.cpu_count() or 1)
    assert seen[72]["torch_threads"] == min(3, cores), seen
    assert own.outcome["metrics"][cpushare.METRIC]["user_set"] == ["OMP_NUM_THREADS"]
    if len(cpus) >= 2:
        assert not set(seen[71]["affinity"]) & set(seen[72]["affinity"]), seen  # disjoint cores
