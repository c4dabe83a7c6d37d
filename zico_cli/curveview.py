"""A memory curve (the placement.curves JSON contract) for a terminal: its headline figures, a sparkline of one
iteration and a table of its steps. Pure Python (the ``zico`` command installs no numpy); the bins are computed as
``placement.curves.resample`` computes them: each the most bytes held within its part of the iteration, so a short
peak is never hidden (tests/cli checks the two agree)."""
from __future__ import annotations

import bisect
from typing import Any

from .follow import human_bytes

BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_BINS = 64


def bin_maxima(points: list[list[float]], n: int) -> list[float]:
    """The most bytes held in each of ``n`` equal parts ``[i/n, (i+1)/n)`` of the iteration.

    Args:
        points: the curve's ``[fraction, bytes]`` steps, fractions ascending in [0, 1) (a step holds until the next;
            before the first, the first step's bytes, as ``MemoryCurve.at``).
        n: bins, >= 1.
    Raises:
        ValueError: no points, or n < 1.
    """
    if n < 1 or not points:
        raise ValueError("a curve needs points and at least one bin")
    fractions = [float(f) for f, _ in points]
    values = [float(b) for _, b in points]
    out = []
    for i in range(n):
        start = i / n
        j = max(bisect.bisect_right(fractions, start) - 1, 0)
        out.append(values[j])
    for f, b in zip(fractions, values):
        if f < 1.0:
            i = min(int(f * n), n - 1)
            out[i] = max(out[i], b)
    return out


def sparkline(values: list[float], low: float, high: float) -> str:
    """One block character per value, ``low`` as the lowest block and ``high`` as the highest."""
    span = high - low
    if span <= 0:
        return BLOCKS[-1] * len(values)
    return "".join(BLOCKS[min(int((v - low) / span * (len(BLOCKS) - 1) + 0.5), len(BLOCKS) - 1)] for v in values)


def seconds_text(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def curve_text(curve: dict[str, Any], title: str, table: int = 0) -> str:
    """The summary of ``curve``: source, device, peak, persistent and transient bytes, iteration time, steps, where a
    snapshot's window lies, a sparkline (from the least bytes held to the peak), and a table of ``table`` bins."""
    meta = curve.get("meta") or {}
    peak, persistent = int(curve["peak_bytes"]), int(curve["persistent_bytes"])
    rows = [("source", f"{curve['source']} (device {curve.get('device', '?')})"),
            ("peak", f"{human_bytes(peak)} ({peak:,} bytes)"),
            ("persistent", f"{human_bytes(persistent)} ({persistent:,} bytes)"),
            ("transient", human_bytes(peak - persistent)),
            ("iteration", seconds_text(float(curve["iteration_s"]))),
            ("steps", f"{len(curve['points']):,}")]
    if meta.get("window"):
        rows.append(("window", f"{meta['window']} ({meta.get('events', '?')} events)"))
    if meta.get("file"):
        rows.append(("file", str(meta["file"])))
    bins = bin_maxima(curve["points"], SPARK_BINS)
    low = min(bins)
    lines = [title, *(f"{k:>11}  {v}" for k, v in rows),
             f"{'one iteration':>11}  {sparkline(bins, low, peak)}",
             f"{'':>11}  {BLOCKS[0]} {human_bytes(low)} … {BLOCKS[-1]} {human_bytes(peak)}"]
    if table:
        lines.append(f"{'fraction':>11}  bytes (most held from there to the next row)")
        for i, b in enumerate(bin_maxima(curve["points"], table)):
            lines.append(f"{i / table:>11.3f}  {human_bytes(b):>10}  {int(b):,}")
    return "\n".join(lines)
