"""Import a PyTorch memory snapshot (``torch.cuda.memory._dump_snapshot`` pickle) as a memory curve.

Note [Snapshots are untrusted input]
A pickle can run arbitrary code when loaded, and a small one can ask for unbounded memory and time.
``load_snapshot`` refuses files over ``MAX_FILE_BYTES``, then loads through
``pickle_guard.load_plain``: a pre-pass over the opcodes refuses imports and object construction
and caps the memo, the stack, nesting, container lengths (``MAX_EVENTS``, the longest list a
snapshot holds), values, strings and integers before anything is built (Note [Bounding a pickle
before loading it]); only then does a restricted unpickler build the plain values. The loaded
object is checked field by field; a malformed file raises SnapshotError whose message names the
field (``device_traces[0][3].action: expected a string, got list``).

Note [Live bytes before the first event]
``device_traces`` is a ring buffer: it may begin mid-run, so tensors allocated before its first
event are still live. The snapshot's ``segments`` give the blocks live at the end (state
``active_allocated``); subtracting the trace's net change (allocs minus completed frees) gives
the bytes live before the first event. A free of an address the trace never allocated is such
an older block; it must lie inside a segment the snapshot knows, or the file is refused.

Units: PyTorch's caching allocator records each trace event with the *requested* size (``alloc``
with the caller's size, frees with the block's ``requested_size``), not the rounded block size,
so the end state counts blocks by their ``requested_size`` too (``size`` in snapshots that lack
it). The curve's peak is then PyTorch's ``requested_bytes.all.peak``, measured equal on an H200
(torch 2.11: 236,089,128 bytes for ResNet-18 batch 16 at 64 x 64); mixing the units made it
land between requested and allocated bytes.

Live bytes follow PyTorch's *active* count: an ``alloc`` adds its size, a ``free_completed``
removes it (``free_requested`` only marks the free; the block is reusable once its streams'
events complete). Older snapshots' ``free`` counts as a completed free.

Note [Finding one iteration]
With two or more ``Optimizer.step`` END annotations inside the trace, the curve is the last full
iteration between two of them. Otherwise, if the signed sizes of the allocs and completed frees
end in a sequence that repeats (the last period equals the one before) and returns memory to its
level, the curve is that earlier complete period (``period.find_period``). Otherwise the whole trace is
one window (``meta.window`` says which).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from placement.curves import MAX_BYTES, MemoryCurve, curve_from_samples
from zico_workloads.curves.period import find_period
from zico_workloads.curves.pickle_guard import PickleRefused, load_plain

# Limits on an upload (docs/curves.md gives each one's reason and the measured cost at the limit).
MAX_FILE_BYTES = 128 << 20  # a 100,000-event snapshot with stacks is ~17 MB; a str may take 4x its bytes
MAX_EVENTS = 1_000_000      # events in one device trace (torch's documented example records 100,000)
MAX_BLOCKS = 1_000_000      # blocks over all segments (a shared blocks list counts each time it is seen)
MAX_TIME_US = 1 << 53       # time_us: microseconds since the epoch, exact in a float64 (until year 2255)
_ACTIONS = {"alloc", "free_requested", "free_completed", "free", "segment_alloc", "segment_free",
            "segment_map", "segment_unmap", "snapshot", "oom"}


class SnapshotError(ValueError):
    """The snapshot file is unreadable, hostile or inconsistent; the message says what and where."""


def load_snapshot(source: str | Path | bytes | BinaryIO) -> dict[str, Any]:
    """Read a snapshot pickle safely (see Note [Snapshots are untrusted input]).

    Args:
        source: a path, the raw bytes, or a binary file object.
    Raises:
        SnapshotError: unreadable, truncated, over ``MAX_FILE_BYTES`` or a pickle_guard limit,
            hostile, or not a snapshot dict.
    """
    if isinstance(source, (str, Path)):
        try:
            size = Path(source).stat().st_size
            if size > MAX_FILE_BYTES:
                raise SnapshotError(f"snapshot file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
            data = Path(source).read_bytes()
        except OSError as exc:
            raise SnapshotError(f"cannot read snapshot {source}: {exc.strerror or exc}") from exc
    elif isinstance(source, bytes):
        data = source
    else:
        data = source.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SnapshotError(f"snapshot is larger than the {MAX_FILE_BYTES:,}-byte limit")
    if not data:
        raise SnapshotError("snapshot is empty")
    try:
        obj = load_plain(data, max_items=MAX_EVENTS)
    except PickleRefused as exc:
        raise SnapshotError(f"snapshot: {exc}") from exc
    del data
    if not isinstance(obj, dict):
        raise SnapshotError(f"snapshot: expected a dict at the top, got {_kind(obj)}")
    for key in ("segments", "device_traces"):
        if key not in obj:
            raise SnapshotError(f"snapshot: missing {key!r} (is this a torch.cuda.memory._dump_snapshot file?)")
    return obj


@dataclass(frozen=True)
class LiveBytes:
    """Live (active) bytes on one device over the trace.

    times_us: shape (n + 1,), microseconds; entry 0 is the first event's time (state before it).
    bytes: shape (n + 1,), live bytes from that time on; entry 0 is the bytes live before the first event.
    steps_end_us: times of ``Optimizer.step`` END annotations on this device, sorted.
    device: the device index the trace belongs to.
    """

    times_us: np.ndarray
    bytes: np.ndarray
    steps_end_us: list[float]
    device: int = 0
    deltas: np.ndarray | None = None  # (n + 1,) signed bytes of each event (0 for marks/segments)

    @property
    def peak_bytes(self) -> int:
        return int(self.bytes.max())


def _kind(v: Any) -> str:
    return type(v).__name__


def _show(v: Any) -> str:
    """A short rendering of a bad value for a message (never the whole of a huge one)."""
    if isinstance(v, int) and v.bit_length() > 128:
        return f"an integer of {v.bit_length()} bits"
    text = repr(v) if isinstance(v, (int, float, str)) else f"a {_kind(v)}"
    return text if len(text) <= 60 else text[:57] + "..."


def _int(v: Any, what: str, lo: int = 0, hi: int = MAX_BYTES) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise SnapshotError(f"{what}: expected an integer, got {_kind(v)}")
    if not lo <= v <= hi:
        raise SnapshotError(f"{what}: {_show(v)} is outside [{lo}, {hi}]")
    return v


def _time_us(v: Any, what: str) -> float:
    """A timestamp in microseconds: an int or finite float in [0, MAX_TIME_US]."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise SnapshotError(f"{what}: expected a number of microseconds, got {_kind(v)}")
    if not 0 <= v <= MAX_TIME_US:  # NaN compares false too; a huge int never reaches float()
        raise SnapshotError(f"{what}: {_show(v)} is outside [0, 2**53] microseconds")
    return float(v)


def _segments(snap: dict[str, Any], device: int) -> tuple[list[tuple[int, int]], int]:
    """Sorted (start, end) address ranges of the device's segments, and bytes in active blocks."""
    segs = snap["segments"]
    if not isinstance(segs, list):
        raise SnapshotError(f"segments: expected a list, got {_kind(segs)}")
    ranges, live, seen = [], 0, 0
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise SnapshotError(f"segments[{i}]: expected a dict, got {_kind(s)}")
        if _int(s.get("device", 0), f"segments[{i}].device", 0, 1 << 16) != device:
            continue
        start = _int(s.get("address"), f"segments[{i}].address", 0, 1 << 64)
        total = _int(s.get("total_size"), f"segments[{i}].total_size")
        ranges.append((start, start + total))
        blocks = s.get("blocks", [])
        if not isinstance(blocks, list):
            raise SnapshotError(f"segments[{i}].blocks: expected a list, got {_kind(blocks)}")
        seen += len(blocks)
        if seen > MAX_BLOCKS:
            raise SnapshotError(f"segments[{i}].blocks: more than {MAX_BLOCKS:,} blocks in all segments")
        for j, b in enumerate(blocks):
            if not isinstance(b, dict):
                raise SnapshotError(f"segments[{i}].blocks[{j}]: expected a dict, got {_kind(b)}")
            size = _int(b.get("size"), f"segments[{i}].blocks[{j}].size")
            if b.get("state") == "active_allocated":
                # The trace's sizes are requested bytes; count live blocks in the same unit.
                live += _int(b["requested_size"], f"segments[{i}].blocks[{j}].requested_size", 0, size) \
                    if "requested_size" in b else size
    if live > MAX_BYTES:
        raise SnapshotError(f"segments: active blocks on device {device} hold {live:,} bytes, over {MAX_BYTES:,}")
    return ranges, live


def live_bytes(snap: dict[str, Any], device: int | None = None) -> LiveBytes:
    """Live bytes over the device's trace (see Notes above).

    Args:
        snap: a dict from :func:`load_snapshot`.
        device: index into ``device_traces``; default: the device with the most events.
    Raises:
        SnapshotError: bad field types, negative or huge sizes, unknown actions, time running
            backwards, no segment on the device at all, frees of addresses outside every known segment,
            double frees, or live bytes that would go negative (trace and segments disagree).
    """
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("device_traces: expected a list of per-device event lists")
    if device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d])) if traces else 0
    if not 0 <= device < len(traces):
        have = f"devices: 0..{len(traces) - 1}" if traces else "it has no device traces"
        raise SnapshotError(f"no device {device} in the snapshot ({have})")
    if not traces[device]:
        raise SnapshotError(f"device_traces[{device}]: no events to build a curve from")
    if len(traces[device]) > MAX_EVENTS:
        raise SnapshotError(f"device_traces[{device}]: {len(traces[device]):,} events; the limit is {MAX_EVENTS:,}")
    ranges, live_end = _segments(snap, device)
    events = traces[device]
    n = len(events)
    times = np.empty(n + 1, dtype=np.float64)
    delta = np.zeros(n + 1, dtype=np.int64)
    allocated: dict[int, int] = {}   # addr -> size, allocated within the trace and not yet freed
    freed: set[int] = set()          # addresses freed (and not re-allocated) within the trace
    is_free = np.zeros(n, dtype=bool)  # events to check against the segments after the loop
    last_t, net = -np.inf, 0
    for k, e in enumerate(events):
        where = f"device_traces[{device}][{k}]"
        if not isinstance(e, dict):
            raise SnapshotError(f"{where}: expected a dict, got {_kind(e)}")
        action = e.get("action")
        if not isinstance(action, str):
            raise SnapshotError(f"{where}.action: expected a string, got {_kind(action)}")
        if action not in _ACTIONS:
            raise SnapshotError(f"{where}.action: unknown action {_show(action)}")
        t = _time_us(e.get("time_us", 0), f"{where}.time_us")
        if t < last_t:
            raise SnapshotError(f"{where}.time_us: time runs backwards ({t} < {last_t})")
        last_t = times[k + 1] = t
        if action in ("snapshot", "oom"):
            continue
        addr = _int(e.get("addr"), f"{where}.addr", 0, 1 << 64)
        size = _int(e.get("size"), f"{where}.size")
        if action.startswith("segment_"):
            if action in ("segment_alloc", "segment_map"):
                ranges.append((addr, addr + size))
            continue
        if action == "alloc":
            if addr in allocated:
                raise SnapshotError(f"{where}: alloc of address {addr:#x} that is already live")
            allocated[addr] = size
            freed.discard(addr)
            delta[k + 1] = size
            net += size
        else:  # free_completed, free or free_requested
            if action != "free_requested":
                if addr in freed:
                    raise SnapshotError(f"{where}: double free of address {addr:#x}")
                if allocated.pop(addr, size) != size:
                    raise SnapshotError(f"{where}: free of {size} bytes at {addr:#x}, which was allocated "
                                        "with another size")
                freed.add(addr)
                delta[k + 1] = -size
                net -= size
            is_free[k] = True
        if abs(net) > MAX_BYTES:  # keeps the int64 sums below exact
            raise SnapshotError(f"{where}: live bytes would change by more than {MAX_BYTES:,} over the trace")
    if not ranges:  # every alloc lies in a segment; a snapshot taken with none held cannot say what a job needs
        raise SnapshotError(f"segments: no segment on device {device}, neither in the snapshot's segments nor made "
                            "by its trace; take the snapshot while the job holds memory (before it exits)")
    # Sorted once: a sort per segment event made a trace of many segment events quadratic.
    ranges.sort()
    for k in np.flatnonzero(is_free).tolist():
        if not _inside(ranges, events[k]["addr"], events[k]["size"]):
            raise SnapshotError(f"device_traces[{device}][{k}]: free of unknown address {events[k]['addr']:#x} "
                                "(in no segment)")
    times[0] = times[1]
    live = np.cumsum(delta) + (live_end - int(delta.sum()))
    if live.min() < 0:
        k = int(np.argmax(live < 0))
        raise SnapshotError(f"device_traces[{device}][{max(k - 1, 0)}]: live bytes would go negative; "
                            "the trace and the segments disagree")
    return LiveBytes(times, live.astype(np.float64), _step_ends(snap, device), device, delta)


def _step_ends(snap: dict[str, Any], device: int) -> list[float]:
    """Sorted times (us) of the ``Optimizer.step`` END annotations on ``device``; each annotation checked."""
    notes = snap.get("external_annotations")
    if notes is None:
        return []
    if not isinstance(notes, list):
        raise SnapshotError(f"external_annotations: expected a list, got {_kind(notes)}")
    steps = []
    for i, a in enumerate(notes):
        if not isinstance(a, dict):
            raise SnapshotError(f"external_annotations[{i}]: expected a dict, got {_kind(a)}")
        name = a.get("name", "")
        if not isinstance(name, str):
            raise SnapshotError(f"external_annotations[{i}].name: expected a string, got {_kind(name)}")
        if "time_us" in a:
            t = _time_us(a["time_us"], f"external_annotations[{i}].time_us")
            if a.get("stage") == "END" and "Optimizer.step" in name and a.get("device", device) == device:
                steps.append(t)
    return sorted(steps)


def _inside(ranges: list[tuple[int, int]], addr: int, size: int) -> bool:
    i = bisect.bisect_right(ranges, (addr, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= addr and addr + size <= ranges[i][1]


def snapshot_curve(source: str | Path | bytes | BinaryIO, device: int | None = None,
                   meta: dict[str, Any] | None = None) -> MemoryCurve:
    """A ``torch-snapshot`` curve from a snapshot file (see the module notes for the window).

    Raises SnapshotError (from loading or :func:`live_bytes`, or when the events span no time).
    """
    lb = live_bytes(load_snapshot(source), device)
    t, b = lb.times_us, lb.bytes
    t0, t1 = t[0], t[-1]
    inside = [s for s in lb.steps_end_us if t0 <= s <= t1]
    window = "whole trace"
    period = find_period(lb.deltas) if len(inside) < 2 else None
    if len(inside) >= 2:
        t0, t1 = inside[-2], inside[-1]
        window = "between the last two optimizer steps"
    elif period is not None:  # the complete period before the last one (Note [Finding one iteration])
        idx = np.flatnonzero(lb.deltas)
        t0, t1 = t[idx[-2 * period]], t[idx[-period]]
        t0 = float(np.nextafter(t0, -np.inf))  # the period's first event belongs to it
        t1 = float(np.nextafter(t1, -np.inf))
        window = f"repeating period of {period} events"
    if t1 <= t0:  # equal first and last times (e.g. a trace stamped with one time): no window to cut
        raise SnapshotError(f"device_traces[{lb.device}]: the events of the {window} span no time "
                            f"(first and last event at {t1:.0f} us); a curve needs a time window")
    lo = max(int(np.searchsorted(t, t0, side="right")) - 1, 0)
    hi = int(np.searchsorted(t, t1, side="right"))
    ts, bs = t[lo:hi].copy(), b[lo:hi].copy()
    ts[0] = t0
    ts, bs = np.append(ts, t1), np.append(bs, bs[-1])
    return curve_from_samples(ts / 1e6, bs, source="torch-snapshot",
                              device=f"cuda:{lb.device}",
                              meta={"window": window, "events": int(len(t) - 1),
                                    "trace_peak_bytes": lb.peak_bytes, **(meta or {})})
