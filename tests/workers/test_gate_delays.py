"""What counts as a delay at the gate (Note [Delays that count] in workers/gate.py): a job alone on its
coordinator is never held back, short waits are bookkeeping, and real delays are reported as running totals."""
import threading
import time
from types import SimpleNamespace

import pytest

from placement.coordinator import Coordinator
from placement.curves import triangular_curve
from workers.gate import DELAY_MIN_S, DELAY_REPORT_EVERY_S, DelayTally, Gate

MIB = 2**20


def _gate(coordinator, curve, job):
    rt = SimpleNamespace(coordinator=coordinator, link=SimpleNamespace(stop_requested=lambda job, placement: None))
    spec = SimpleNamespace(curve=curve.to_dict(), job=job, placement=1)
    return Gate(rt, spec)


def test_a_job_alone_on_its_coordinator_is_never_held_back():
    curve = triangular_curve(10 * MIB, 100 * MIB, iteration_s=0.2)
    coordinator = Coordinator(60 * MIB)  # below the job's own peak: a neighbour could never start beside it
    gate = _gate(coordinator, curve, 1)
    gate.join(1)
    for i in range(5):
        assert gate.wait(1, i) == 0.0
        gate.progress(1, "iteration_start", i)
        gate.progress(1, "iteration_end", i)


def test_a_job_with_a_neighbour_in_flight_waits_at_the_gate_until_it_has_room():
    curve = triangular_curve(10 * MIB, 100 * MIB, iteration_s=0.2)
    coordinator = Coordinator(105 * MIB)  # b's iteration never fits beside a's persistent bytes and a's peak
    a, b = _gate(coordinator, curve, 1), _gate(coordinator, curve, 2)
    a.join(1)
    b.join(2)
    assert a.wait(1, 0) < DELAY_MIN_S  # nothing else in flight: a starts at once
    a.progress(1, "iteration_start", 0)
    waited = []
    t = threading.Thread(target=lambda: waited.append(b.wait(2, 0)))
    t.start()
    t.join(0.3)
    assert t.is_alive(), "b started beside a's iteration"
    a.progress(1, "iteration_end", 0)  # a's iteration is over: b may start (alone, Note [Running alone])
    t.join(5)
    assert not t.is_alive() and waited[0] >= 0.3


def test_short_waits_are_not_delays_and_real_ones_are_aggregated():
    now = [0.0]
    tally = DelayTally(clock=lambda: now[0])
    assert not tally.add(DELAY_MIN_S / 2)
    assert tally.report(final=True) is None  # nothing but noise: nothing to report
    assert tally.add(0.2) and tally.add(0.5) and not tally.add(0.001)
    assert tally.report() is None  # the report period has not passed
    now[0] += DELAY_REPORT_EVERY_S
    got = tally.report()
    assert got == {"delays": 2, "delay_s": 0.7, "delay_max_s": 0.5,
                   "gate_wait_s": pytest.approx(0.7 + DELAY_MIN_S / 2 + 0.001)}
    assert tally.report(final=True) is None  # nothing new since
    tally.add(0.1)
    assert tally.report(final=True)["delays"] == 3


def test_a_new_jobs_warm_up_does_not_wait_out_a_busy_neighbours_whole_run():
    # Note [Warm-up iteration] (placement/pacing.py): a neighbour iterating back to back used to keep the new job out until it ended
    curve = triangular_curve(10 * MIB, 100 * MIB, iteration_s=0.02)
    coordinator = Coordinator(150 * MIB)  # the two peaks never fit together: they must alternate
    a, b = _gate(coordinator, curve, 1), _gate(coordinator, curve, 2)
    a.join(1)
    done = []
    started = threading.Event()

    def run_a():
        for i in range(60):
            a.wait(1, i)
            a.progress(1, "iteration_start", i)
            started.set()
            time.sleep(0.02)  # the iteration's work
            a.progress(1, "iteration_end", i)
            done.append(i)

    t = threading.Thread(target=run_a)
    t.start()
    assert started.wait(5)
    b.join(2)
    b.wait(2, 0)  # b's warm-up is admitted...
    admitted_after = len(done)
    b.progress(2, "iteration_start", 0)
    time.sleep(0.02)  # b's warm-up work
    b.progress(2, "iteration_end", 0)
    t.join(30)
    assert not t.is_alive() and len(done) == 60
    assert admitted_after < 10, f"b's warm-up waited for {admitted_after} of a's 60 iterations"
