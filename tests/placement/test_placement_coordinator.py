"""The coordinator on a manual clock (decisions, delay records, budget changes) and with real
worker-style threads (blocking waits)."""
import threading
import time

import pytest

from placement.coordinator import Coordinator
from placement.curves import triangular_curve
from placement.device_sim import DeviceRun, DeviceStats
from placement.state import Job

GB = 1e9
M0, P = 1.0 * GB, 5.0 * GB


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _pair(budget, clock):
    c = triangular_curve(M0, P, iteration_s=1.0)
    coord = Coordinator(budget, clock=clock)
    coord.add_job("a", c)
    coord.add_job("b", c)
    return coord


def test_the_second_job_waits_half_an_iteration_under_the_tightest_budget():
    clock = Clock()
    coord = _pair((P + M0) * 1.01, clock)
    assert coord.request_start("a").admit
    d = coord.request_start("b")
    assert not d.admit and d.reason == "budget"
    assert d.delay_s == pytest.approx(0.5, abs=0.01)
    clock.t = d.delay_s
    assert coord.request_start("b").admit
    [rec] = coord.drain_delays()
    assert (rec.job_id, rec.iteration, rec.reason) == ("b", 0, "budget")
    assert rec.delay_ms == pytest.approx(500, abs=10)
    assert coord.drain_delays() == []


def test_a_job_that_fits_starts_at_once_and_leaves_no_record():
    clock = Clock()
    coord = _pair(2 * P, clock)
    assert coord.request_start("a").admit and coord.request_start("b").admit
    assert list(coord.delays) == [] and coord.delays_recorded == 0


def test_asking_twice_for_the_same_iteration_is_an_error():
    coord = _pair(2 * P, Clock())
    coord.request_start("a")
    with pytest.raises(RuntimeError, match="in flight"):
        coord.request_start("a")


def test_below_the_minimal_budget_the_answer_is_wait_for_a_change():
    clock = Clock()
    coord = _pair((P + M0) * 0.9, clock)
    assert coord.request_start("a").admit       # b has not loaded anything yet
    d = coord.request_start("b")                # but b would have to hold P next to a's M0
    assert (d.admit, d.delay_s, d.reason) == (False, None, "infeasible")
    coord.set_budget(2 * P)
    assert coord.request_start("b").admit


def test_a_job_that_never_fits_runs_alone_once_nothing_is_in_flight():
    clock = Clock()
    coord = _pair((P + M0) * 0.9, clock)          # b's iteration never fits beside a's M0
    assert coord.request_start("a").admit
    assert coord.request_start("b").reason == "infeasible"   # a is running: b waits
    clock.t += 0.5
    coord.end_iteration("a")
    d = coord.request_start("b")                   # nothing in flight: b runs alone
    assert d.admit and d.reason == "alone"
    assert [(r.job_id, r.reason) for r in list(coord.delays)] == [("b", "infeasible")]
    assert coord.delays[0].delay_ms == pytest.approx(500.0)
    assert coord.request_start("a").reason == "infeasible"   # and a waits for b in turn


def test_a_job_that_never_fits_waits_behind_an_earlier_waiter():
    clock = Clock()
    coord = _pair((P + M0) * 0.9, clock)
    assert coord.request_start("a").admit
    assert not coord.request_start("b").admit     # b waits first
    clock.t += 0.5
    coord.end_iteration("a")
    d = coord.request_start("a")                  # a fits, but it is behind b in the line
    assert (d.admit, d.reason) == (False, "line")
    assert coord.request_start("b").reason == "alone"


def test_a_newcomer_waits_until_its_persistent_bytes_fit_beside_every_commitment():
    clock = Clock()
    tall = triangular_curve(M0, P, iteration_s=1.0)
    coord = Coordinator(P + 2 * M0, clock=clock)
    coord.add_job("a", tall)
    coord.add_job("b", tall)
    assert coord.request_start("a").admit
    assert coord.request_start("b").admit is False   # its rise would meet a's peak
    flat = triangular_curve(M0, M0 * 1.01, iteration_s=0.05)  # its own iteration is short
    coord.add_job("c", flat)
    # c's iteration fits now, but its persistent M0 beside a's peak and b's reservation not
    d = coord.request_start("c")
    assert not d.admit and d.delay_s > 0


def test_an_earlier_waiter_is_not_overtaken():
    """Time slicing regime: when a ends, b (waiting) goes before a's next iteration."""
    clock = Clock()
    c = triangular_curve(M0, P, iteration_s=1.0, forward_fraction=0.9)  # flat-ish tops: no overlap fits
    coord = Coordinator(P + M0 + 0.01 * GB, clock=clock)
    coord.add_job("a", c)
    coord.add_job("b", c)
    assert coord.request_start("a").admit
    assert not coord.request_start("b").admit
    clock.t = 1.0
    coord.end_iteration("a")
    d = coord.request_start("a")
    assert not d.admit and d.reason == "line"
    assert coord.request_start("b").admit


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="budget_bytes"):
        Coordinator(0)
    coord = _pair(2 * P, Clock())
    with pytest.raises(ValueError, match="already"):
        coord.add_job("a", triangular_curve(M0, P))
    with pytest.raises(ValueError, match="fraction"):
        coord.report_progress("a", 1.5)


def test_a_lower_budget_holds_within_two_iterations():
    c = triangular_curve(M0, P, iteration_s=1.0)
    run = DeviceRun(2 * P)
    run.add_job(Job("a", "t", c, iterations=40, compute_share=0.5))
    run.add_job(Job("b", "t", c, iterations=40, compute_share=0.5))
    run.advance_to(10.0)
    assert run.stats.peak_bytes > 1.5 * P          # in phase while the budget allowed it
    new_budget = (P + M0) * 1.02
    run.gate.set_budget(new_budget)
    run.advance_to(12.0)                             # two iterations to settle
    run.stats = DeviceStats()
    run.advance_to(30.0)
    assert 0 < run.stats.peak_bytes <= new_budget * (1 + 1e-6)


def test_worker_threads_block_until_their_gate_opens():
    """Real threads and a real clock: two jobs of 40 ms iterations under the tightest budget
    never have their rising halves overlap."""
    c = triangular_curve(M0, P, iteration_s=0.04)
    coord = Coordinator((P + M0) * 1.01)
    starts = {"a": [], "b": []}
    for j in starts:
        coord.add_job(j, c)

    def job(name):
        for _ in range(5):
            assert coord.wait_to_start(name, timeout_s=5)
            starts[name].append(time.monotonic())
            time.sleep(0.04)
            coord.end_iteration(name)

    threads = [threading.Thread(target=job, args=(n,)) for n in starts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(len(v) == 5 for v in starts.values())
    # the first start of the later job is about half an iteration after the other's
    first = sorted([starts["a"][0], starts["b"][0]])
    assert first[1] - first[0] >= 0.015
    assert any(r.reason == "budget" for r in coord.delays)


def _alternate(coord, clock, rounds):
    """Two jobs under a budget for one at a time: every round one waits 0.25 s for the other."""
    for i in range(rounds):
        first, other = ("a", "b") if i % 2 == 0 else ("b", "a")
        assert coord.request_start(first).admit
        assert not coord.request_start(other).admit
        clock.t += 0.25
        coord.end_iteration(first)
        assert coord.request_start(other).admit
        coord.end_iteration(other)


def test_delay_records_are_a_bounded_ring_with_running_totals(monkeypatch):
    import placement.coordinator as coordinator_module
    full_clock = Clock()
    full = _pair(P, full_clock)  # the default cap: keeps every record of this short run
    _alternate(full, full_clock, 6)
    monkeypatch.setattr(coordinator_module, "DELAY_RECORDS_MAX", 3)
    clock = Clock()
    coord = _pair(P, clock)
    _alternate(coord, clock, 6)
    everything = full.drain_delays()
    assert len(everything) > 3 and sum(r.delay_ms >= 249 for r in everything) == 6
    assert len(coord.delays) == 3
    assert coord.delays_recorded == len(everything) == full.delays_recorded
    assert coord.delay_ms_total == pytest.approx(sum(r.delay_ms for r in everything))
    assert coord.drain_delays() == everything[-3:]
    assert coord.delays_recorded == len(everything)  # draining keeps the totals


def test_a_warm_up_waits_for_a_falling_neighbours_iteration_end():
    # Note [A warm-up beside a falling neighbour]: a neighbour's cache does not fall with its allocated bytes, so a
    # joiner's warm-up (flat at its peak) is planned beside the neighbour's peak held to its iteration's end.
    from placement.pacing import warmup_curve

    falling = triangular_curve(M0, P, iteration_s=1.0)  # a's allocated bytes reach 3 GB at 0.75 of its iteration
    delays = {}
    for warmup in (False, True):
        clock = Clock()
        coord = Coordinator(1.6 * P, clock=clock)
        coord.add_job("a", falling, loaded=True)
        assert coord.request_start("a").admit
        clock.t = 0.6
        coord.report_progress("a", 0.6)  # in a's backward pass
        coord.add_job("b", warmup_curve(falling), warmup=warmup)
        d = coord.request_start("b")
        assert not d.admit and d.reason == "budget"
        delays[warmup] = d.delay_s
    assert delays[False] == pytest.approx(0.15, abs=0.02)  # beside a's falling curve
    assert delays[True] == pytest.approx(0.4, abs=0.02)    # at a's iteration end
    clock.t = 1.0
    coord.end_iteration("a")
    assert coord.request_start("b").admit
    assert not coord.request_start("a").admit  # a now waits for b's warm-up; its gate returns its cache
