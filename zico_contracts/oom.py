"""The shared allocator's out-of-memory report in words, for failure reasons people read.

``zico_allocator.last_oom()`` returns the pool's last failed allocation as a dict (the C++
``DevicePool::last_oom_json``, docs/allocator.md): ``reason`` (``budget`` | ``capacity`` |
``fragmentation`` | ``agent``), ``device``, ``job``, ``requested_bytes``, ``rounded_bytes``,
``job_allocated_bytes``, ``allocated_bytes``, ``reserved_bytes``, ``budget_bytes`` and
``capacity_bytes`` (None: no limit), ``free_cached_bytes``, ``largest_free_block``, ``detail``
(the device agent's refusal, or None) and ``timestamp_s``. :func:`describe_oom` turns one into a
sentence; :func:`readable_reason` rewrites failure reasons that carry the dict's Python repr as
``"... (allocator: {...})"`` (what job processes and device workers appended before they called
:func:`describe_oom`), so reasons stored in that form read the same as new ones.

Standard library only, like every module of this package: the job process, the device worker and
the web side import it.
"""
from __future__ import annotations

import ast
from typing import Any

MARKER = "(allocator: "
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(value: Any) -> str:
    """``1610612736`` -> ``"1.50 GiB"`` (binary units, as the pages, nvidia-smi and torch.cuda report)."""
    n = float(value)
    i = 0
    while abs(n) >= 1024 and i < len(_UNITS) - 1:
        n /= 1024
        i += 1
    return f"{int(n)} B" if i == 0 else f"{n:.2f} {_UNITS[i]}"


def _num(report: dict, key: str) -> int | float | None:
    v = report.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def describe_oom(report: dict) -> str:
    """One sentence for an allocator out-of-memory report (the dict of ``zico_allocator.last_oom()``).

    Example: ``"the allocator refused 2.00 MiB for job 7 on device 0: the device budget of 16.00 GiB
    was reached (reserved 15.99 GiB, allocated 15.10 GiB, of which this job 12.00 GiB)"``.

    Never raises (it is called on failure paths): missing or malformed keys are left out of the
    sentence, and something that is not a dict is returned as ``str(report)``.
    """
    if not isinstance(report, dict):
        return str(report)
    reason = report.get("reason")
    size = _num(report, "rounded_bytes") or _num(report, "requested_bytes")
    job, device = report.get("job"), report.get("device")
    who = f" for job {job}" if isinstance(job, int) and not isinstance(job, bool) and job >= 0 else ""
    if device == -1 and not isinstance(device, bool):  # the allocator's host pool (zico_allocator: -1 is "cpu")
        where = " on the CPU"
    else:
        where = f" on device {device}" if isinstance(device, (int, str)) and not isinstance(device, bool) else ""
    head = f"the allocator refused {format_bytes(size) if size is not None else 'an allocation'}{who}{where}"
    budget, capacity = _num(report, "budget_bytes"), _num(report, "capacity_bytes")
    cached, largest = _num(report, "free_cached_bytes"), _num(report, "largest_free_block")
    detail = report.get("detail") if isinstance(report.get("detail"), str) and report.get("detail") else None
    if reason == "budget":
        why = f"the device budget of {format_bytes(budget)} was reached" if budget is not None else \
            "the device budget was reached"
    elif reason == "capacity":
        why = f"the device has no more memory (capacity {format_bytes(capacity)})" if capacity is not None else \
            "the device has no more memory"
    elif reason == "fragmentation":
        why = "enough memory is cached free but no free block is large enough"
        if cached is not None and largest is not None:
            why += f" ({format_bytes(cached)} free, the largest block {format_bytes(largest)})"
    elif reason == "agent":
        why = "the device agent refused more memory" + (f": {detail}" if detail else "")
    elif isinstance(reason, str) and reason:
        why = f"reason {reason!r}"
    else:
        why = "no reason given"
    figures = []
    if _num(report, "reserved_bytes") is not None:
        figures.append(f"reserved {format_bytes(report['reserved_bytes'])}")
    if _num(report, "allocated_bytes") is not None:
        mine = _num(report, "job_allocated_bytes")
        figures.append(f"allocated {format_bytes(report['allocated_bytes'])}"
                       + (f", of which this job {format_bytes(mine)}" if mine is not None and who else ""))
    return f"{head}: {why}" + (f" ({', '.join(figures)})" if figures else "")


def _report_at(text: str, start: int) -> tuple[dict, int] | None:
    """The dict repr starting at ``text[start]`` (a ``{``) and the index after the ``)`` closing it, or
    None. The dict may hold strings with braces (``detail``), so each ``}`` followed by ``)`` is tried
    until one closes a literal that parses."""
    end = text.find("})", start)
    while end != -1:
        try:
            value = ast.literal_eval(text[start:end + 1])  # literals only: never runs code
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value, end + 2
        end = text.find("})", end + 1)
    return None


def readable_reason(text: str) -> str:
    """``text`` with every ``(allocator: {...})`` holding a dict repr replaced by ``(<sentence>)``
    (:func:`describe_oom`: "(the allocator refused ...)"). Text without one, or whose dict does not parse (e.g. cut short by a length
    limit), comes back unchanged. Never raises."""
    if not isinstance(text, str) or MARKER not in text:
        return text
    out, i = [], 0
    while (at := text.find(MARKER + "{", i)) != -1:
        found = _report_at(text, at + len(MARKER))
        if found is None:
            break
        report, after = found
        out.append(text[i:at] + "(" + describe_oom(report) + ")")
        i = after
    return "".join(out) + text[i:]
