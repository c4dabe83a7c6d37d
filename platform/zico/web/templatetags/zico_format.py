"""Template filters that format Zico's figures for people: bytes as KiB/MiB/GiB, seconds, limits, percentages."""
from __future__ import annotations

from django import template

from zico_contracts import walltime
from zico_contracts.oom import format_bytes, readable_reason

register = template.Library()


@register.filter
def bytes_h(value) -> str:
    """``1610612736`` -> ``"1.50 GiB"`` (binary units, as nvidia-smi and torch.cuda report); ``—`` if None."""
    if value in (None, ""):
        return "—"
    return format_bytes(value)


@register.filter
def seconds_h(value) -> str:
    """``0.2345`` -> ``"0.23 s"``, ``125`` -> ``"2 min 5 s"``; ``—`` if None."""
    if value in (None, ""):
        return "—"
    s = float(value)
    if s < 60:
        return f"{s:.2f} s"
    m, s = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


@register.filter
def duration_h(value) -> str:
    """A limit in seconds: ``3`` -> ``"3 s"``, ``3600`` -> ``"1 h 0 min"`` (zico_contracts.walltime); ``—`` if None."""
    if value in (None, ""):
        return "—"
    return walltime.format_duration(float(value))


@register.filter
def wall_limit_h(job) -> str:
    """A job's wall-clock limit as its run is sent it (``Job.wall_limit``): ``"1 h 0 min (the tenant's limit)"``;
    ``—`` when none holds."""
    limit = job.wall_limit()
    return walltime.describe(limit) if limit is not None else "—"


@register.filter
def percent(value, total) -> str:
    """``percent(3, 4)`` -> ``"75%"``; ``—`` when either is missing or total is 0."""
    try:
        return f"{100 * float(value) / float(total):.0f}%"
    except (TypeError, ValueError, ZeroDivisionError):
        return "—"


@register.filter
def ratio(value, total) -> float:
    """``value / total`` clamped to [0, 1] (for progress bars and meters); 0 when undefined."""
    try:
        return max(0.0, min(1.0, float(value) / float(total)))
    except (TypeError, ValueError, ZeroDivisionError):
        return 0.0


@register.filter
def reason_h(text) -> str:
    """A failure or status-change reason for people: an allocator out-of-memory report stored as a Python dict
    (``(allocator: {...})``, how device workers wrote it) becomes a sentence (zico_contracts.oom)."""
    return readable_reason(text) if isinstance(text, str) else text


@register.filter
def headline(text) -> str:
    """A failure reason's first line: what went wrong (a device worker's reason puts how the process ended and
    the last lines of its stderr on the lines below it: Note [Outcome of a job process] in workers.agent.agent)."""
    return text.split("\n", 1)[0] if isinstance(text, str) else text


@register.filter
def below_headline(text) -> str:
    """A failure reason's lines after its first (:func:`headline`), or ``""``."""
    return text.split("\n", 1)[1] if isinstance(text, str) and "\n" in text else ""


@register.filter
def details_h(details) -> str:
    """An event's details as ``key value`` pairs; ``*_bytes`` in binary units, ``*_s`` in seconds."""
    if not isinstance(details, dict):
        return ""
    parts = []
    for k, v in details.items():
        if k.endswith("_bytes") and isinstance(v, (int, float)):
            v = bytes_h(v)
        elif k.endswith("_s") and isinstance(v, (int, float)):
            v = seconds_h(v)
        parts.append(f"{k.replace('_', ' ')} {v}")
    return " · ".join(parts)


@register.filter
def ago(when) -> str:
    """A past datetime as ``"just now"``, ``"12 s ago"``, ``"5 min ago"``, ``"3 h ago"`` or ``"2 d ago"``."""
    if not when:
        return "never"
    from django.utils import timezone

    s = max(0, int((timezone.now() - when).total_seconds()))
    if s < 5:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit} ago"
    return f"{s} s ago"
