"""Three plain PyTorch scripts (examples/plain-scripts/: an MLP with Adam, an LSTM with gradient clipping and
SGD, a Transformer with gradient accumulation under bf16 autocast; none uses any Zico API), submitted with
`zico submit` to a running stack, each profiled as its run starts (it runs once: its first step is printed once),
co-located on the one device, and followed with `zico logs -f`; then submitted again, their stored curves reused,
and co-located under a device budget below the sum of their solo peaks.

Real PostgreSQL, real Redis (private), a real web server, and the real processes: control consumer, scheduler
service and one CPU device worker, started the documented way.

Each job's threads are the platform's own (Note [Compute per slot] in zico_contracts.cpushare: the worker's 4 slots
on the test machine's 2 cores give each job one thread, every slot on both cores; torch's default threads
would oversubscribe them, and a step took 10x longer). Settings tuned for the test:
``ZICO_MAX_SLOWDOWN=64`` and ``ZICO_MAX_GROUP=3`` for the scheduler, so that a group of three short jobs whose time
shifts stretch them is placed together on the one device: the slowdown limit is not under test here, and what the
plan predicts for the LSTM depends on the compute shares round 1 measured on the test machine (the default limit
keeps a group only when each job slows less, and the default group is two jobs; with shares of 0.30-0.45 on a
loaded machine the plan predicted up to 3.4x for the LSTM, 4.0x on a quiet one; at a limit of 4, and in CI at a
limit of 8, round 2 placed two of them and the third only after one had ended); the worker is never restarted:
each stored curve carries the bytes its pool held while it was profiled (these small scripts' 20 MiB segments hold
1.2-1.3x what they allocate), and the scheduler and the worker's gate plan with the one rule
(``placement.gating.planning_curve``) against the device row's gate headroom; round 2's budget lies halfway
between what the three need together (``placement.gating.held_floor`` of their planning curves) and the sum of
the bytes the pool held for each in round 1, so that the plan, not the budget, decides whether they run together; the first round's jobs carry their own budget (``--budget 64MiB``, the floor), so a script may be profiled beside
jobs of known memory that leave it that much (Note [Where a script is profiled] in zico.scheduling.service).
"""
import json
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.cli import zico
from django.db.models import Max

from placement.gating import held_floor, planning_curve
from servers import stop_process
from zico.cluster.models import Device
from zico.jobs.models import Job, MemoryProfile
from zico.telemetry.models import TimelinePoint
from zico.tenants.models import ApiToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "plain-scripts"
MiB = 1 << 20
# Enough steps that a script still runs when the next new one starts beside it: a new script is profiled only
# once its neighbours' curves are known (their first iterations), and it takes seconds to start (torch's import);
# at 30 steps a script's run was over by then about one run in three on a quiet machine
STEPS = 120
COMMANDS = {"mlp": ["python", "mlp_adam.py", "--steps", str(STEPS)],
            "lstm": ["python", "lstm_clip_sgd.py", "--steps", str(STEPS)],
            "transformer": ["python", "transformer_accum_bf16.py", "--steps", str(STEPS)]}




def submit(home: Path, project: Path, name: str, *options: str) -> int:
    out = zico(home, "submit", "--json", "--name", name, *options, str(project), "--",
               *COMMANDS[name])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job"]["id"]


def follow(home: Path, job_ids: dict[str, int]) -> dict[str, subprocess.Popen]:
    return {name: zico(home, "logs", "-f", str(pk), popen=True) for name, pk in job_ids.items()}


def followed(procs: dict[str, subprocess.Popen]) -> dict[str, tuple[int, str]]:
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        out[name] = (proc.returncode, stdout + stderr)
    return out


def seconds_running(job_ids) -> dict[int, set[int]]:
    """The stored timeline's seconds at which each job held memory on the device (allocated tensors: in a shared
    pool a job may use segments another job's requests reserved, so its own reserved bytes may be 0)."""
    seen: dict[int, set[int]] = defaultdict(set)
    for job_id, second in TimelinePoint.objects.filter(job_id__in=list(job_ids), allocated_bytes__gt=0) \
            .values_list("job_id", "second"):
        seen[job_id].add(second)
    return seen


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def measured_curve(job: Job) -> MemoryProfile:
    """The job's first stored curve. A run whose compute share was measured beside others stores its curve again
    with the share in its meta (zico.jobs.shares), so a job may hold several rows: all carry the same curve."""
    rows = list(MemoryProfile.objects.filter(job=job).order_by("created_at", "id"))
    assert rows, f"job {job.pk} has no stored curve"
    assert {(r.source, r.peak_bytes, r.persistent_bytes) for r in rows} == {(rows[0].source, rows[0].peak_bytes,
                                                                          rows[0].persistent_bytes)}, rows
    return rows[0]


def test_three_plain_scripts_profiled_as_they_start_then_colocated_under_a_budget_below_their_peaks(
        stack, waiter, tenant_owner, live_server, tmp_path, settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="300", ZICO_MAX_SLOWDOWN="64", ZICO_MAX_GROUP="3",
                     ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "4", "--loglevel", "INFO")
    device = stack.registered_device()
    _, owner = tenant_owner
    _, secret = ApiToken.issue(owner, "cli")
    project = tmp_path / "project"
    shutil.copytree(SCRIPTS, project, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    assert zico(home, "login", live_server.url, "--token", secret).returncode == 0
    ended = ("succeeded", "failed", "cancelled")

    # Round 1: new code. Each script is profiled as its run starts and runs once.
    # a job's budget is the agent's hard cap: the LSTM would hold 90 MiB
    first = {name: submit(home, project, name, "--budget", "128MiB") for name in COMMANDS}
    scheduler = stack.scheduler("--interval", "1")
    logs = follow(home, first)
    waiter(lambda: all(Job.objects.get(pk=i).status in ended for i in first.values()), 300, "round 1 to end")
    shown = followed(logs)
    jobs = {n: Job.objects.get(pk=i) for n, i in first.items()}
    peaks, held = {}, {}  # solo peaks: allocated (the curve's), and reserved (what the pool held for the job)
    for name, job in jobs.items():
        assert job.status == "succeeded", (name, job.failure_reason, stack.log("worker.log")[-3000:])
        profile = measured_curve(job)
        assert profile.source == "allocator-trace" and profile.peak_bytes > 0
        peaks[name] = profile.peak_bytes
        assert profile.curve["meta"]["held_peak_bytes"] >= profile.peak_bytes  # stored for the planning rule
        held[name] = job.metrics["peak_reserved_bytes"]
        assert held[name] >= peaks[name], (name, held[name], peaks[name])
        rc, text = shown[name]
        assert rc == 0, text
        # the run was not restarted to be profiled: its first step and its end were printed once each
        assert text.count(f"{name} step 0 loss") == 1 and text.count(f"{name} done: {STEPS} steps") == 1, text
        assert "profiling: the memory of the first 4 iterations is measured; the run goes on" in text
        assert job.metrics["iterations_done"] == STEPS
        share = job.metrics["cpu_share"]  # the platform's threads: 4 slots on this host's cores
        assert share["slots"] == 4 and share["threads"] == max(1, share["cores"] // 4) and not share["user_set"], share
        assert "[zico] this job's share of the CPU device: " in text, text
        assert job.placements.count() == 1  # one placement: the profile and the run are one
    together = seconds_running(first.values())
    overlap = max(len(together[a.pk] & together[b.pk]) for a in jobs.values() for b in jobs.values() if a != b)
    assert overlap >= 1, "no two of the new scripts ran on the device at the same time"

    # Round 2: the same code and commands again, under a budget below the sum of their solo peaks, on the same
    # worker: the stored curves carry their pool overhead (Note [One planning rule] in placement.gating).
    stop_process(scheduler)  # so that the three are ready in one round and planned as one group
    headroom = Device.objects.get(pk=device.pk).gate_headroom  # the row's, which the worker gates with
    need = held_floor([planning_curve(measured_curve(job).memory_curve()) for job in jobs.values()], headroom)
    # halfway between what the three need and the sum of the bytes the pool held for each alone: at the need
    # itself the pool's reserved bytes (chunks, rounded up) reached the budget, where a request waits for room
    budget = max(int(need + (sum(held.values()) - need) / 2) // MiB * MiB, 64 * MiB)
    print(f"\nsolo peaks {peaks} allocated, {held} reserved (sums {sum(peaks.values())}, {sum(held.values())}); gate "
          f"headroom {headroom}; the three need {int(need)} together (the least budget the planning rule can plan "
          f"them under); budget {budget}")
    assert max(held.values()) < budget < sum(held.values()), (peaks, held, need, budget)
    Device.objects.get(pk=device.pk).set_budget(budget)
    t_budget = time.time()
    waiter(lambda: TimelinePoint.objects.filter(device=device, job__isnull=True, budget_bytes=budget).exists(), 60,
           "the worker to apply the lower budget")
    again = {name: submit(home, project, name) for name in COMMANDS}
    stack.scheduler("--interval", "1", log="scheduler2.log")
    logs = follow(home, again)
    waiter(lambda: all(Job.objects.get(pk=i).status in ended for i in again.values()), 300, "round 2 to end")
    shown = followed(logs)
    reruns = {n: Job.objects.get(pk=i) for n, i in again.items()}
    for name, job in reruns.items():
        assert job.status == "succeeded", (name, job.failure_reason, stack.log("worker.log")[-3000:])
        moves = [e.details.get("reason") for e in job.events.filter(kind="status_change")]
        assert "memory curve of an identical job reused; not profiled" in moves, moves
        assert measured_curve(job).peak_bytes == peaks[name]  # the stored curve, not measured again
        rc, text = shown[name]
        assert rc == 0 and text.count(f"{name} step 0 loss") == 1 and "profiling:" not in text, text
    plans = [p.plan for j in reruns.values() for p in j.placements.all()]
    group = max(plans, key=lambda plan: len(plan.get("job_ids", [])))
    waits = [(j.pk, e.details) for j in reruns.values() for e in j.events.filter(kind="waiting")]
    assert sorted(group["job_ids"]) == sorted(again.values()), (plans, waits)  # the three co-located by one plan
    assert group["sum_of_peaks_bytes"] > group["budget_bytes"] >= group["predicted_peak_bytes"], group
    together = seconds_running(again.values())
    shared = [s for s in set().union(*together.values()) if sum(s in t for t in together.values()) >= 2]
    all_three = sorted(set.intersection(*(together[i] for i in again.values())))
    assert all_three, ("the three reruns never held memory on the device in the same second",
                       {n: (min(together[i]), max(together[i])) for n, i in again.items()})
    device_peak = TimelinePoint.objects.filter(device=device, job__isnull=True, second__gte=int(t_budget) + 1) \
        .aggregate(m=Max("reserved_bytes"))["m"]
    assert 0 < device_peak <= budget < sum(held.values()), (device_peak, budget, held)
    print(f"solo peaks {held} reserved (sum {sum(held.values())}), budget {budget}, device peak reserved {device_peak}, "
          f"largest group {len(group['job_ids'])} jobs, predicted peak {group['predicted_peak_bytes']}, predicted "
          f"slowdowns {group.get('predicted_slowdown')}, {len(shared)} s with two or more jobs running, "
          f"{len(all_three)} s with all three; measured slowdowns "
          f"{ {n: j.metrics.get('slowdown') for n, j in reruns.items()} }")
