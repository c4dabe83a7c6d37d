"""Snapshot importer tests: the real snapshots in data/, and a malformed/hostile-input suite (hostile
sizes: test_snapshot_limits.py)."""
import pickle

import pytest

from workers.curves.snapshot import SnapshotError, live_bytes, load_snapshot, snapshot_curve

MiB = 1 << 20


def direct_peak(path):
    """Oracle: peak live bytes by a plain walk over the trace, independent of the importer."""
    snap = pickle.loads(path.read_bytes())  # trusted here: the test's own fixture files
    trace = max(snap["device_traces"], key=len)
    end_live = sum(b.get("requested_size", b["size"]) for s in snap["segments"] for b in s["blocks"]
                   if b["state"] == "active_allocated")  # the trace's unit: requested bytes
    net = sum(e["size"] if e["action"] == "alloc" else -e["size"] for e in trace
              if e["action"] in ("alloc", "free_completed"))
    live = peak = end_live - net
    for e in trace:
        if e["action"] == "alloc":
            live += e["size"]
        elif e["action"] == "free_completed":
            live -= e["size"]
        peak = max(peak, live)
    return peak, end_live


def test_real_snapshots_import_with_the_trace_peak(real_snapshot):
    path = real_snapshot
    curve = snapshot_curve(path)
    peak, end_live = direct_peak(path)
    assert curve.source == "torch-snapshot"
    assert curve.peak_bytes == peak
    assert curve.bytes[-1] == end_live  # the curve ends at what the segments hold
    assert curve.iteration_s > 0 and 0 < curve.persistent_bytes <= curve.peak_bytes


def snapshot_bytes(events, blocks=((0x1000, 4 * MiB, "active_allocated"),), seg=(0x1000, 64 * MiB)):
    seg_d = {"device": 0, "address": seg[0], "total_size": seg[1],
             "blocks": [{"address": a, "size": s, "state": st} for a, s, st in blocks]}
    return pickle.dumps({"segments": [seg_d], "device_traces": [events]})


def ev(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}


GOOD = [ev("alloc", 0x1000 + 8 * MiB, 2 * MiB, 10), ev("free_requested", 0x1000 + 8 * MiB, 2 * MiB, 20),
        ev("free_completed", 0x1000 + 8 * MiB, 2 * MiB, 20), ev("alloc", 0x1000 + 16 * MiB, MiB, 30)]


def test_a_small_wellformed_snapshot_counts_memory_live_before_the_trace():
    # blocks live at the end: 4 MiB (older) + the 1 MiB allocated last -> 4 MiB live before the trace
    blocks = ((0x1000, 4 * MiB, "active_allocated"), (0x1000 + 16 * MiB, MiB, "active_allocated"))
    lb = live_bytes(load_snapshot(snapshot_bytes(GOOD, blocks)))
    assert list(lb.bytes) == [4 * MiB, 6 * MiB, 6 * MiB, 4 * MiB, 5 * MiB]
    curve = snapshot_curve(snapshot_bytes(GOOD, blocks))
    assert curve.peak_bytes == 6 * MiB and curve.iteration_s == pytest.approx(20e-6)


@pytest.mark.parametrize("data, message", [
    (snapshot_bytes(GOOD)[:-40], "truncated"),
    (b"", "empty"),
    (b"not a pickle at all", "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "expected a dict"),
    (pickle.dumps({"segments": []}), "missing 'device_traces'"),
    (pickle.dumps({"segments": "x", "device_traces": [GOOD]}), "segments: expected a list"),
    (pickle.dumps({"segments": [], "device_traces": "x"}), "device_traces: expected a list"),
    (snapshot_bytes([ev("alloc", 0x1000, "big", 1)]), r"\[0\].size: expected an integer"),
    (snapshot_bytes([ev("alloc", 0x1000, 1.5, 1)]), r"\[0\].size: expected an integer"),
    (snapshot_bytes([ev("alloc", 0x1000, -512, 1)]), r"\[0\].size: -512 is outside"),
    (snapshot_bytes([ev("alloc", 0x1000, 1 << 60, 1)]), r"\[0\].size: \d+ is outside"),
    (snapshot_bytes([ev("explode", 0x1000, 512, 1)]), "unknown action 'explode'"),
    (snapshot_bytes([ev("free_completed", 0xDEAD0000000, 512, 1)]), "free of unknown address"),
    (snapshot_bytes([ev("free_completed", 0x1000, 4 * MiB, 1), ev("free_completed", 0x1000, 4 * MiB, 2)]),
     "double free"),
    (snapshot_bytes([ev("alloc", 0x1000 + 8 * MiB, 512, 5), ev("alloc", 0x1000 + 9 * MiB, 512, 4)]),
     "time runs backwards"),
    (snapshot_bytes([ev("alloc", 0x1000 + 8 * MiB, MiB, 5)]), "span no time"),
    (snapshot_bytes([ev("alloc", 0x1000, MiB, 1), ev("alloc", 0x1000 + MiB, MiB, 2)], blocks=()), "go negative"),
    (snapshot_bytes([["alloc", 1, 2]]), r"\[0\]: expected a dict"),
])
def test_malformed_snapshots_are_refused_with_a_message_naming_the_problem(data, message):
    with pytest.raises(SnapshotError, match=message):
        snapshot_curve(data)


def test_a_pickle_that_imports_os_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    path = tmp_path / "hostile.pickle"
    path.write_bytes(hostile)
    with pytest.raises(SnapshotError, match=r"import os\.system"):
        snapshot_curve(path)
    assert not marker.exists()
    # the same through a nested protocol-4 reduce hidden inside a plain-looking dict
    class Boom:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))
    with pytest.raises(SnapshotError, match="refused"):
        load_snapshot(pickle.dumps({"segments": [], "device_traces": [[Boom()]]}, protocol=4))
    assert not marker.exists()


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        snapshot_curve(tmp_path / "nope.pickle")


def test_a_repeating_trace_is_cut_to_one_period():
    base = 0x1000 + 8 * MiB
    events, t = [], 0
    for it in range(3):  # three identical iterations: +1 MiB, +2 MiB, -2 MiB, -1 MiB, four frees of 512 B pairs
        for action, off, size in [("alloc", 0, MiB), ("alloc", MiB, 2 * MiB), ("free_completed", MiB, 2 * MiB)] + \
                [(a, 4 * MiB, 512) for a in ("alloc", "free_completed") * 3] + [("free_completed", 0, MiB)]:
            t += 10
            events.append(ev(action, base + off, size, t))
        t += 100
    curve = snapshot_curve(snapshot_bytes(events))
    assert curve.meta["window"] == "repeating period of 10 events"
    assert curve.peak_bytes == 7 * MiB and curve.persistent_bytes == 4 * MiB
    assert curve.iteration_s == pytest.approx(200e-6)


def test_period_search_gives_up_after_its_comparison_budget():
    import numpy as np

    from workers.curves.period import find_period

    period = np.array([4096] + [512, -512] * 40 + [-4096])  # 82 events, back to its level
    deltas = np.tile(period, 3)
    assert find_period(deltas) == 82
    assert find_period(deltas, max_work=50) is None  # a hostile trace cannot make it quadratic
