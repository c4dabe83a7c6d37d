"""One planning rule (Note [One planning rule] in placement.gating): from the same stored profile the scheduler's
snapshot, the device worker's gate (its coordinator's curve), tools.colocate (which stores its solo profile with
the held peak and hands it to the same gate) and the simulator's device plan the very same curve, raised by the
stored pool overhead; the scheduler and the worker plan it against the same share of the device's budget."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from placement.coordinator import Coordinator
from placement.curves import curve_from_dict
from placement.device_sim import DeviceRun
from placement.gating import DEFAULT_GATE_HEADROOM, gate_share, planning_curve, with_held_peak
from placement.state import Job as SimJob
from workers.gate import Gate
from zico.jobs.models import MemoryProfile
from zico.scheduling.snapshot import take_snapshot

DATA = Path(__file__).resolve().parents[1] / "placement" / "data" / "demo-pair-profile.json"


def _solo_profile():
    """The demo's tiny-lm as profiled alone (allocated curve, the pool's held peak), with a backward mark before
    its peak, as an allocator-trace profile writes one."""
    d = json.loads(DATA.read_text())
    body, held = d["curves"][1], d["reserved_bytes"][1]
    curve = curve_from_dict(body)
    peak_at = float(curve.fractions[int(curve.bytes.argmax())])
    curve.meta["phase_fractions"] = {"forward": 0.0, "backward": peak_at / 2}
    return curve, held


def _gate_curve(curve_json, budget):
    """The curve the device worker's gate gives its coordinator for a run spec carrying ``curve_json``."""
    rt = SimpleNamespace(coordinator=Coordinator(budget), link=SimpleNamespace(stop_requested=lambda _j, _p: None))
    return Gate(rt, SimpleNamespace(job=1, placement=1, curve=curve_json)).curve


def _same(a, b):
    assert np.array_equal(a.fractions, b.fractions) and np.array_equal(a.bytes, b.bytes)
    assert (a.persistent_bytes, a.iteration_s) == (b.persistent_bytes, b.iteration_s)


def test_the_scheduler_the_workers_gate_colocate_and_the_simulator_plan_the_same_curve(cluster, tenant, make_job):
    solo, held = _solo_profile()
    stored = with_held_peak(solo, held)  # what the worker sends in profile_done (workers.profiletrace.profiled_curve)
    job = make_job(tenant, curve=stored)  # stored as the control consumer stores it (MemoryProfile.record)
    row = MemoryProfile.objects.get(job=job)

    scheduler = next(j for j in take_snapshot().state.queued if j.id == job.pk).curve
    worker = _gate_curve(row.curve, 1 << 30)  # the run spec carries the row's curve JSON (Placement.run_spec)
    colocate = _gate_curve(with_held_peak(solo, held).to_dict(), 1 << 30)  # tools.colocate.run's agent gate
    sim = DeviceRun(1 << 30)
    sim.add_job(SimJob(id="lm", tenant="t", curve=curve_from_dict(row.curve)))
    simulator = sim.jobs["lm"].pacer.curve  # the curve the simulated device's coordinator is given

    expected = planning_curve(curve_from_dict(row.curve))
    for got in (scheduler, worker, colocate, simulator):
        _same(got, expected)
    # the rule did something: the stored overhead is in every point, the peak held from the backward mark
    overhead = held - solo.peak_bytes
    assert overhead > 0 and expected.persistent_bytes == solo.persistent_bytes + overhead
    assert expected.peak_bytes == pytest.approx(held) and expected.meta["held_overhead_bytes"] == overhead
    assert expected.meta["peak_from_fraction"] < float(solo.fractions[int(solo.bytes.argmax())])


def test_the_scheduler_plans_a_group_against_the_share_the_workers_coordinator_gates_with(cluster):
    # the device row's headroom: the scheduler's snapshot offers its rest, the worker applies the same row figure
    shares = {d.id: d.group_share for d in take_snapshot().state.devices}
    assert shares[cluster[0].pk] == pytest.approx(gate_share(cluster[0].gate_headroom))
    assert cluster[0].gate_headroom == DEFAULT_GATE_HEADROOM
