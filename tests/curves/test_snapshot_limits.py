"""Hostile-size snapshots: small files, built here from pickle opcodes, that ask the unpickler for huge
memory or time. Each is imported in a child process (address space capped at 1 GiB, CPU at 60 s) and
must end in a clear SnapshotError naming the limit, using little more memory and CPU than a tiny valid
snapshot imported the same way in the same run. Plus each pickle_guard limit on its own, in-process."""
import json
import os
import pickle
import re
import struct
import subprocess
import sys

import pytest

from zico_workloads.curves import pickle_guard
from zico_workloads.curves.pickle_guard import PickleRefused, check_pickle
from zico_workloads.curves.snapshot import MAX_BLOCKS, MAX_EVENTS, MAX_FILE_BYTES, SnapshotError, snapshot_curve

MiB = 1 << 20
A = 0x100000  # the one segment's address


def text(s: str) -> bytes:
    """SHORT_BINUNICODE s."""
    return b"\x8c" + bytes([len(s)]) + s.encode()


def event(action: str) -> bytes:
    """EMPTY_DICT MARK ... SETITEMS: {"action", "addr": A, "size": 512, "stream": 0, "time_us": 1}."""
    return (b"}(" + text("action") + text(action) + text("addr") + b"J" + struct.pack("<i", A) + text("size")
            + b"M" + struct.pack("<H", 512) + text("stream") + b"K\x00" + text("time_us") + b"K\x01u")


def memo_index_bomb(index: int = 2**30) -> bytes:
    """9 bytes: PROTO 4, EMPTY_LIST, LONG_BINPUT index, STOP (the unpickler sizes its memo to 2 x index)."""
    return b"\x80\x04]r" + struct.pack("<I", index) + b"."


def nested_lists(n: int = 10_000_000) -> bytes:
    """n MARKs then n LISTs: [[[...]]] n deep, 2 bytes per list (20 MB for 10 million)."""
    return b"\x80\x04" + b"(" * n + b"l" * n + b"."


def nested_tuples(n: int = 10_000_000) -> bytes:
    """None wrapped n times by TUPLE1: ((((None,),),),), 1 byte per level and a stack of one."""
    return b"\x80\x04N" + b"\x85" * n + b"."


def many_events(n: int = 10_000_000, actions=("alloc", "free_completed")) -> bytes:
    """A valid-looking snapshot whose one trace repeats two events (by default alloc/free_completed of one
    block) n times: memo GETs of two event dicts, 2 bytes per event, APPENDS batches of 1,000 as the
    Pickler writes them."""
    segment = (b"}(" + text("device") + b"K\x00" + text("address") + b"J" + struct.pack("<i", A)
               + text("total_size") + b"J" + struct.pack("<i", MiB) + text("blocks") + b"]u")
    out = [b"\x80\x04}(", text("segments"), b"](", segment, b"e", text("device_traces"), b"]]",
           b"(", event(actions[0]), b"q\x00", event(actions[1]), b"q\x01", b"e"]
    batch = b"(" + b"h\x00h\x01" * 500 + b"e"
    out += [batch] * ((n - 2) // 1000) + [b"au."]
    return b"".join(out)


def many_segment_events() -> bytes:
    """200,000 segment_alloc events: the importer once re-sorted its segment list at each (quadratic)."""
    return many_events(200_000, ("segment_alloc", "segment_alloc"))


CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
from zico_workloads.curves.snapshot import SnapshotError, snapshot_curve
try:
    snapshot_curve(sys.argv[1])
    rc, message = 0, "imported"
except SnapshotError as exc:
    rc, message = 3, str(exc)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
# VmHWM: this process's peak resident memory since exec (the fork's copy of the parent not counted)
print(json.dumps({"message": message, "hwm": int(status["VmHWM"].split()[0]) * 1024, "cpu": time.process_time()}))
sys.exit(rc)
"""


def import_in_child(data: bytes, tmp_path, name: str):
    """(exit code, message, peak RSS bytes, CPU seconds) of snapshot_curve on ``data`` in a fresh process."""
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OPENBLAS_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                           timeout=300)
    assert child.stdout.strip(), child.stderr  # a crash (e.g. MemoryError outside the importer) has no report
    report = json.loads(child.stdout.strip().splitlines()[-1])
    return child.returncode, report["message"], report["hwm"], report["cpu"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """Max RSS and CPU of importing a tiny valid snapshot in the same kind of child."""
    good = pickle.dumps({"segments": [{"device": 0, "address": A, "total_size": MiB, "blocks": []}],
                         "device_traces": [[{"action": "alloc", "addr": A, "size": 512, "time_us": 1},
                                            {"action": "free_completed", "addr": A, "size": 512, "time_us": 2}]]})
    rc, output, rss, cpu = import_in_child(good, tmp_path_factory.mktemp("baseline"), "good")
    assert rc == 0 and output == "imported", output
    return rss, cpu


@pytest.mark.parametrize("build, message, extra_mib", [
    (memo_index_bomb, r"memo index 1,073,741,824 skips past the 0 entries put so far \(opcode at byte 3\)", 16),
    (nested_lists, r"more than 100,000 marks on the stack", 16),
    (nested_tuples, r"nesting deeper than 32 levels", 16),
    (many_events, r"a list, tuple or dict grows past 1,000,000 entries", 16),
    # loaded and checked (under every limit): its 200,000 segment ranges and per-event arrays
    (many_segment_events, r"device_traces\[0\]: the events of the whole trace span no time", 64),
], ids=lambda v: getattr(v, "__name__", None))
def test_a_hostile_size_is_refused_before_it_is_built(build, message, extra_mib, baseline, tmp_path):
    # Measured before this pre-pass and these checks existed (docs/curves.md has the table): 2**30 as
    # a memo index took 36 s and 16.9 GB, the nested lists 0.9 GB, the events 29 s of CPU. Here: each
    # is refused at about the cost of the tiny valid import (the file's own bytes aside).
    data = build()
    rc, output, rss, cpu = import_in_child(data, tmp_path, build.__name__)
    assert rc == 3, output
    assert "\n" not in output  # one line
    assert re.search(message, output), output
    base_rss, base_cpu = baseline
    assert rss < base_rss + 2 * len(data) + extra_mib * MiB, (rss, base_rss)  # the file itself, and little more
    assert cpu < base_cpu + 5, (cpu, base_cpu)


@pytest.mark.parametrize("data, message", [
    (b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b".",
     r"a str or bytes of 1,099,511,627,776 bytes; the limit is 1,048,576"),
    (b"\x80\x04\x8b" + struct.pack("<i", 1 << 20) + b".", r"an integer of 1,048,576 bytes; the limit is 1,024"),
    (b"\x80\x04I" + b"9" * 4000 + b"\n.", r"a decimal number of 4,000 characters"),
    (b"\x80\x04" + b"N" * 100_001 + b".", r"more than 100,000 entries on the stack"),
    (b"\x80\x04Nh\x05.", r"a memo GET of an index never put"),
    (b"\x80\x04]q\x00]q\x01ah\x01K\x01a.", r"changed after it was put inside another container"),
    (b"\x80\x04X\x10\x00\x00\x00abc.", r"truncated"),
    (b"\x80\x04\x8f.", r"refused: the pickle asks for a set"),
    (b"\x80\x04N)R.", r"refused: the pickle asks for a call \(REDUCE\)"),
    (b"cos\nsystem\n(S'echo hi'\ntR.", r"refused: the pickle asks to import os\.system \(GLOBAL\)"),
    (b"\x80\x04\x8c\x02os\x8c\x06system\x93.", r"refused: the pickle asks for an import \(STACK_GLOBAL\)"),
    (b"\x80\x04N.N", None),  # bytes after STOP are never read
])
def test_each_opcode_limit_refuses_with_its_name(data, message):
    if message is None:
        check_pickle(data, max_items=10)
        return
    with pytest.raises(PickleRefused, match=message):
        check_pickle(data, max_items=10)


def test_the_container_length_limit_is_the_callers():
    check_pickle(pickle.dumps(list(range(10))), max_items=10)
    with pytest.raises(PickleRefused, match="grows past 10 entries"):
        check_pickle(pickle.dumps(list(range(11))), max_items=10)
    with pytest.raises(PickleRefused, match="grows past 10 entries"):
        check_pickle(pickle.dumps({i: i for i in range(11)}), max_items=10)
    with pytest.raises(PickleRefused, match="grows past 10 entries"):
        check_pickle(pickle.dumps(tuple(range(11))), max_items=10)


@pytest.mark.parametrize("limit, data, message", [
    # The real values need files of 16M opcodes or 4M values: the same checks, at a lowered limit.
    ("MAX_OPCODES", pickle.dumps([None] * 100, protocol=4), "more than 50 opcodes"),
    ("MAX_OBJECTS", pickle.dumps([[] for _ in range(100)], protocol=4), "more than 50 values"),
    ("MAX_MEMO", pickle.dumps([[] for _ in range(100)], protocol=4), "more than 50 memo entries"),
])
def test_the_count_limits_refuse_at_their_value(monkeypatch, limit, data, message):
    monkeypatch.setattr(pickle_guard, limit, 50)
    with pytest.raises(PickleRefused, match=message):
        check_pickle(data, max_items=MAX_EVENTS)


def test_the_snapshot_limits_are_checked_before_reading_and_after_loading(tmp_path):
    big = tmp_path / "big.pickle"
    with big.open("wb") as f:  # sparse: no disk used
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(SnapshotError, match=f"snapshot file is {MAX_FILE_BYTES + 1:,} bytes; the limit is"):
        snapshot_curve(big)
    # One blocks list shared by many segments (the Pickler writes it once): a small file, many visits.
    blocks = [{"address": A, "size": 512, "state": "inactive"}] * 1000
    segments = [{"device": 0, "address": A, "total_size": MiB, "blocks": blocks}] * (MAX_BLOCKS // 1000 + 1)
    data = pickle.dumps({"segments": segments,
                         "device_traces": [[{"action": "alloc", "addr": A, "size": 512, "time_us": 1}]]})
    assert len(data) < 100_000
    with pytest.raises(SnapshotError, match=r"segments\[1000\].blocks: more than 1,000,000 blocks"):
        snapshot_curve(data)
