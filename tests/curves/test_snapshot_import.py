"""Snapshot importer tests: the real snapshots in data/, and a malformed/hostile-input suite (hostile
sizes: test_snapshot_limits.py)."""
import pickle

import pytest

from zico_workloads.curves.snapshot import SnapshotError, live_bytes, load_snapshot, snapshot_curve

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
    (pickle.dumps({"segments": [], "device_traces": [[ev("alloc", 0x1000, 512, 1), ev("free_completed", 0x1000, 512, 2)]]}),
     "segments: no segment on device 0, neither in the snapshot's segments nor made by its trace"),
    (snapshot_bytes([["alloc", 1, 2]]), r"\[0\]: expected a dict"),
    (snapshot_bytes([ev("alloc", 0x1000, 512, float("nan"))]), r"\[0\].time_us: nan is outside"),
    (snapshot_bytes([ev("alloc", 0x1000 + 8 * MiB, 1 << 50, 1), ev("alloc", 0x1000 + 9 * MiB, 1 << 50, 2)]),
     r"\[1\]: live bytes would change by more than 1,125,899,906,842,624 over the trace"),
    (snapshot_bytes(GOOD, blocks=((0x1000, 1 << 50, "active_allocated"), (0x2000, 1 << 50, "active_allocated"))),
     "segments: active blocks on device 0 hold 2,251,799,813,685,248 bytes"),
    (snapshot_bytes([ev("alloc", 0x1000, 512, True)]), r"\[0\].time_us: expected a number of microseconds, got bool"),
    (snapshot_bytes([ev("alloc", 0x1000 + 8 * MiB, 512, 2**62), ev("alloc", 0x1000 + 9 * MiB, 512, 2**62 + 1)]),
     r"\[0\].time_us: 4611686018427387904 is outside \[0, 2\*\*53\]"),  # would round to one float64
])
def test_malformed_snapshots_are_refused_with_a_message_naming_the_problem(data, message):
    with pytest.raises(SnapshotError, match=message):
        snapshot_curve(data)


def repeating_events(times):
    """Three identical iterations of 10 events each (see the period test below), at the given times."""
    base, events = 0x1000 + 8 * MiB, []
    for _ in range(3):
        for action, off, size in [("alloc", 0, MiB), ("alloc", MiB, 2 * MiB), ("free_completed", MiB, 2 * MiB)] + \
                [(a, 4 * MiB, 512) for a in ("alloc", "free_completed") * 3] + [("free_completed", 0, MiB)]:
            events.append(ev(action, base + off, size, next(times)))
    return events


def with_annotations(notes):
    snap = pickle.loads(snapshot_bytes(GOOD))
    snap["external_annotations"] = notes
    return pickle.dumps(snap)


STEP = {"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0}
HUGE = 10**400  # an integer float() cannot take
# Each of these ended in a raw TypeError, OverflowError or IndexError before; now a message naming the field.
MALFORMED_FIELDS = [
    ("a list as action", snapshot_bytes(GOOD[:3] + [ev(["alloc"], 0x1000 + 20 * MiB, 512, 40)]),
     "device_traces[0][3].action: expected a string, got list"),
    ("a 10**400 time", snapshot_bytes([ev("alloc", 0x1000 + 8 * MiB, 512, HUGE)]),
     f"device_traces[0][0].time_us: an integer of {HUGE.bit_length()} bits is outside [0, 2**53] microseconds"),
    ("integer external_annotations", with_annotations(7), "external_annotations: expected a list, got int"),
    ("a huge annotation time", with_annotations([{**STEP, "time_us": 15}, {**STEP, "time_us": HUGE}]),
     f"external_annotations[1].time_us: an integer of {HUGE.bit_length()} bits is outside [0, 2**53] microseconds"),
    ("equal first and last timestamps", snapshot_bytes(repeating_events(iter(lambda: 7, None))),
     "device_traces[0]: the events of the repeating period of 10 events span no time (first and last event at "
     "7 us); a curve needs a time window"),
]


@pytest.mark.parametrize("data, message", [c[1:] for c in MALFORMED_FIELDS], ids=[c[0] for c in MALFORMED_FIELDS])
def test_a_malformed_field_is_named_in_the_error(data, message):
    with pytest.raises(SnapshotError) as err:
        snapshot_curve(data)
    assert str(err.value) == message


@pytest.mark.parametrize("data, message", [c[1:] for c in MALFORMED_FIELDS], ids=[c[0] for c in MALFORMED_FIELDS])
def test_the_curve_command_shows_the_same_message_as_its_error(data, message, tmp_path):
    from django.core.management import CommandError, call_command

    path = tmp_path / "bad.pickle"
    path.write_bytes(data)
    with pytest.raises(CommandError) as err:
        call_command("curve", "import", str(path))
    assert str(err.value) == message


def test_manage_py_prints_one_line_and_no_traceback_for_a_malformed_snapshot(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "bad.pickle"
    path.write_bytes(MALFORMED_FIELDS[0][1])
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, str(root / "manage.py"), "curve", "import", str(path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"CommandError: {MALFORMED_FIELDS[0][2]}"


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

    from zico_workloads.curves.period import find_period

    period = np.array([4096] + [512, -512] * 40 + [-4096])  # 82 events, back to its level
    deltas = np.tile(period, 3)
    assert find_period(deltas) == 82
    assert find_period(deltas, max_work=50) is None  # a hostile trace cannot make it quadratic
