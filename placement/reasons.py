"""Why a job waits: the value object a policy returns beside its placements for every queued job
it did not place (placement.policies ``decide``), and the plain-words sentences with their figures.

Note [Waiting reasons]
~~~~~~~~~~~~~~~~~~~~~~
A policy refuses a job either before looking at devices (its tenant's quota; no device at all)
or device by device. For the per-device refusals it keeps the most informative one — the device
that came closest to taking the job, in this order: the slowdown limit (a plan exists but slows a
job too much), no room beside the jobs already there, tenants that do not share, the device's group
is full (or it runs a job, for the one-job-per-device baseline), the device is too small — and says
it in one sentence naming that device and the figures. A job of another tenant is never named in a
sentence (its owner may not see it; the job page keeps co-located jobs of other tenants anonymous
too); the figures keep its id for the round's logs (the job's ``waiting`` Event, which its tenant reads, keeps
only its own tenant's ids: Note [A waiting Event names no other tenant's job] in zico.scheduling.waiting).

Devices the policy does not see (offline or draining) are the service's to add:
:func:`unavailable_devices` turns "no device can hold it" into "the device that can is offline".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

from .state import Device, Job

QUOTA = "quota"
NO_DEVICE = "no_device"                  # no device online at all
DEVICE_OFFLINE = "device_offline"        # only an offline or draining device can hold it
NO_DEVICE_FITS = "no_device_fits"        # every online device's budget is below its peak
DEVICE_BUSY = "device_busy"              # the devices big enough are full (group size, one job per device)
TENANTS_DO_NOT_SHARE = "tenants_do_not_share"
NO_ROOM = "no_room"                      # not enough budget beside the jobs already on the device
SLOWDOWN_LIMIT = "slowdown_limit"
PLACEMENT_REFUSED = "placement_refused"  # the policy placed it but the locked re-check refused
IDENTICAL_PROFILING = "identical_profiling"  # an identical job is being profiled; its curve will serve this one
KINDS = (QUOTA, NO_DEVICE, DEVICE_OFFLINE, NO_DEVICE_FITS, DEVICE_BUSY, TENANTS_DO_NOT_SHARE, NO_ROOM,
         SLOWDOWN_LIMIT, PLACEMENT_REFUSED, IDENTICAL_PROFILING)

# Note [Waiting reasons]: per-device refusals, most informative first.
_CLOSENESS = {SLOWDOWN_LIMIT: 0, NO_ROOM: 1, TENANTS_DO_NOT_SHARE: 2, DEVICE_BUSY: 3, NO_DEVICE_FITS: 4}


@dataclass(frozen=True)
class WaitReason:
    """Why a queued job was not placed this round.

    Attributes:
        kind: one of :data:`KINDS`.
        text: one plain-words sentence with the figures (bytes as GiB/MiB, slowdowns as ×).
        device: label of the device the sentence names (``host:kindindex``), or None.
        figures: the numbers behind the sentence (bytes, ratios, counts, job ids), JSON-ready.
    """

    kind: str
    text: str
    device: str | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(KINDS)}")


def format_bytes(n: float) -> str:
    """``3435973836`` -> ``"3.2 GiB"``, ``298844160`` -> ``"285 MiB"`` (binary units, 3 figures)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    x, i = float(n), 0
    while abs(x) >= 1024 and i < len(units) - 1:
        x, i = x / 1024, i + 1
    return f"{int(x)} B" if i == 0 else (f"{x:.0f} {units[i]}" if abs(x) >= 100 else f"{x:.3g} {units[i]}")


def format_slowdown(s: float) -> str:
    return f"{s:.2f}×"


def format_limit(s: float) -> str:
    return f"{s:g}×"


def job_label(job: Job, other: Job) -> str:
    """How a sentence about ``job`` names ``other``: itself, a job of its tenant by id, or anonymously."""
    if other.id == job.id:
        return "this job"
    return f"job {other.id}" if other.tenant == job.tenant else "a job of another tenant"


def _jobs_phrase(job: Job, group: Sequence[Job]) -> str:
    names = [job_label(job, o) for o in group]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# -- reasons decided before any device is looked at ----------------------------------------------
def quota(kind: str, used: float, limit: float, need: float = 1) -> WaitReason:
    """The tenant's quota is spent: ``kind`` is ``"jobs"`` (running jobs) or ``"bytes"`` (device bytes)."""
    if kind == "jobs":
        text = f"tenant quota: {int(used)} of {int(limit)} running jobs"
    else:
        text = (f"tenant quota: {format_bytes(used)} of {format_bytes(limit)} device memory in use, "
                f"its {format_bytes(need)} peak does not fit")
    return WaitReason(QUOTA, text, figures={"quota": kind, "used": float(used), "limit": float(limit),
                                            "need": float(need)})


def no_device() -> WaitReason:
    return WaitReason(NO_DEVICE, "no device is online", figures={"online_devices": 0})


def no_profiling_device(unavailable: Sequence[tuple[str, float, str]], online: int = 0) -> WaitReason:
    """A job without a memory curve waits for a device to be profiled on. ``unavailable``: ``(label, budget
    bytes, why)`` of the devices it cannot go to now; ``online``: how many of those are online (busy, not
    off): with any, the sentence says no device is *free*, never that none is online."""
    states = f" ({', '.join(f'{label} {status}' for label, _, status in unavailable)})" if unavailable else ""
    if online:
        return WaitReason(DEVICE_BUSY, f"no device is free to profile it on{states}",
                          figures={"online_devices": online})
    return WaitReason(NO_DEVICE, f"no device is online to profile it on{states}", figures={"online_devices": 0})


def profiling_tenants_do_not_share(own_tenant_allows: bool, devices: Sequence[str],
                                   job_ids: Sequence[Any]) -> WaitReason:
    """A job without a memory curve waits: every online device it could be profiled on (``devices``, labels)
    holds a job of another tenant, and its own tenant (``own_tenant_allows`` False) or the other tenant does
    not allow sharing a device with other tenants (placement.tenancy.refusing_tenants). The other tenants'
    jobs (``job_ids``) are kept in the figures for operators, never named in the sentence."""
    who = "this job's tenant does not" if not own_tenant_allows else "the other tenant does not"
    return WaitReason(TENANTS_DO_NOT_SHARE,
                      f"no device to profile it on: every online device ({', '.join(devices)}) runs a job of another "
                      f"tenant and {who} allow sharing a device with other tenants",
                      figures={"online_devices": len(devices), "job_ids": list(job_ids),
                               "own_tenant_allows": bool(own_tenant_allows)})


def identical_profiling(job_id: int, same_tenant: bool = True) -> WaitReason:
    """A job without a memory curve waits for an identical job's profile (same workload and params), which will
    serve it too, instead of being profiled a second time. ``same_tenant`` False: ``job_id`` is another tenant's
    job, never named in the sentence (the figures keep it)."""
    which = f"identical job {job_id}" if same_tenant else "an identical job of another tenant"
    return WaitReason(IDENTICAL_PROFILING, f"waiting for the profile of {which} (same workload and "
                                           "params): it is not profiled twice", figures={"job": job_id})


def no_device_fits(job: Job, devices: Sequence[Device]) -> WaitReason:
    largest = max(devices, key=lambda d: d.budget_bytes)
    return WaitReason(NO_DEVICE_FITS, f"no device can hold its {format_bytes(job.peak_bytes)} peak "
                                      f"(largest budget {format_bytes(largest.budget_bytes)})",
                      device=largest.label, figures={"peak_bytes": float(job.peak_bytes),
                                                     "largest_budget_bytes": float(largest.budget_bytes)})


# -- per-device refusals (Note [Waiting reasons]) --------------------------------------------------
def busy(job: Job, dev: Device, group: Sequence[Job], max_group: int) -> WaitReason:
    if max_group == 1:
        what = f"it runs {_jobs_phrase(job, group)} (one job per device)"
    else:
        what = f"it already runs {len(group)} jobs (at most {max_group} per device)"
    return WaitReason(DEVICE_BUSY, f"waiting for device {dev.label}: {what}", device=dev.label,
                      figures={"running": len(group), "max_group": max_group, "job_ids": [o.id for o in group]})


def tenants_do_not_share(job: Job, dev: Device, group: Sequence[Job], tenants: Mapping[Hashable, Any]) -> WaitReason:
    """``job`` may not join ``group`` on ``dev``: a job of another tenant runs there, or is being profiled there
    (``dev.profiling_tenants``, Note [Profile runs are tenants on their device] in placement.tenancy), and one
    of the tenants refuses to share a device."""
    others = [o for o in group if o.tenant != job.tenant]
    who = ("this job's tenant does not" if not tenants[job.tenant].allow_cross_tenant
           else "the other tenant does not")
    what = "runs" if others else "is profiling"
    return WaitReason(TENANTS_DO_NOT_SHARE,
                      f"waiting for device {dev.label}: it {what} a job of another tenant and {who} allow sharing "
                      f"a device with other tenants", device=dev.label,
                      figures={"job_ids": [o.id for o in others],
                               "own_tenant_allows": bool(tenants[job.tenant].allow_cross_tenant)})


def no_room(job: Job, dev: Device, group: Sequence[Job], need_bytes: float, budget_bytes: float,
            device_need_bytes: float) -> WaitReason:
    """No sharing plan puts ``job`` beside ``group`` on ``dev``. ``need_bytes``: the group's least plannable budget
    and ``budget_bytes`` the share of ``dev``'s budget a group is planned against (both in the figures);
    ``device_need_bytes``: the least *device* budget that would admit the group (placement.gating.held_floor),
    the figure the sentence gives.

    Note [A budget reason names a device budget]: a group is planned against ``budget × (1 − gate headroom)``
    (Note [One planning rule] in placement.gating), an internal figure; a sentence naming it would leave the
    user to divide by the headroom to learn which device could take the group. The sentence names the device
    budget that would admit the group and the device's own, both in the units of ``Device.budget_bytes``."""
    if device_need_bytes > dev.budget_bytes * (1 + 1e-9):
        what = (f"it needs a device budget of at least {format_bytes(device_need_bytes)}; this device's is "
                f"{format_bytes(dev.budget_bytes)}, so it waits until the jobs there end")
    else:  # the budget would do, the plan search found no sharing plan all the same
        what = f"no sharing plan fits this device's budget of {format_bytes(dev.budget_bytes)}"
    return WaitReason(NO_ROOM, f"waiting for device {dev.label}: beside {_jobs_phrase(job, group)} {what}",
                      device=dev.label, figures={"need_bytes": float(need_bytes), "budget_bytes": float(budget_bytes),
                                                 "device_budget_bytes": float(dev.budget_bytes),
                                                 "device_need_bytes": float(device_need_bytes),
                                                 "job_ids": [o.id for o in group]})


def slowdown(job: Job, dev: Device, group: Sequence[Job], slowed: Job | None, factor: float,
             limit: float) -> WaitReason:
    """Co-locating ``job`` with ``group`` on ``dev`` would slow ``slowed`` (None: every member, by
    compute contention alone) by ``factor`` > ``limit``."""
    whom = _jobs_phrase(job, [*group, job]) if slowed is None else job_label(job, slowed)
    return WaitReason(SLOWDOWN_LIMIT, f"waiting for device {dev.label}: co-locating with {_jobs_phrase(job, group)} "
                                      f"would slow {whom} by {format_slowdown(factor)} "
                                      f"(limit {format_limit(limit)})", device=dev.label,
                      figures={"slowdown": round(float(factor), 4), "limit": float(limit),
                               "slowed_job_id": None if slowed is None else slowed.id,
                               "job_ids": [o.id for o in group]})


def placement_refused(device: str) -> WaitReason:
    """The policy placed the job on ``device`` but the locked re-check refused it: the device or the
    jobs on it changed meanwhile. (The re-check's own message may name other tenants: the service
    logs it and keeps it out of the reason.)"""
    return WaitReason(PLACEMENT_REFUSED, f"placement on device {device} was refused by the final check (the device "
                                         "or its jobs changed meanwhile); the next round tries again", device=device)


def closeness(kind: str, measure: float = 0.0) -> tuple[int, float]:
    """Sort key of a per-device refusal, closest first (Note [Waiting reasons]): its kind's rank,
    then ``measure`` (the slowdown for :data:`SLOWDOWN_LIMIT`, the missing bytes for :data:`NO_ROOM`)."""
    return (_CLOSENESS[kind], float(measure))


def unavailable_devices(reason: WaitReason, peak_bytes: float,
                        unavailable: Sequence[tuple[str, float, str]]) -> WaitReason:
    """Refine a policy's :data:`NO_DEVICE` or :data:`NO_DEVICE_FITS` with the devices it could not
    see, ``(label, budget bytes, status)`` each (status e.g. ``"offline"``, ``"draining"``): the
    largest unavailable one that would hold ``peak_bytes`` is named. Other reasons pass through."""
    if reason.kind not in (NO_DEVICE, NO_DEVICE_FITS):
        return reason
    fits = [u for u in unavailable if peak_bytes <= u[1]]
    if fits:
        label, budget, status = max(fits, key=lambda u: u[1])
        if reason.kind == NO_DEVICE:
            text = f"no device is online; device {label} can hold its {format_bytes(peak_bytes)} peak but is {status}"
        else:
            text = (f"no online device can hold its {format_bytes(peak_bytes)} peak (largest budget "
                    f"{format_bytes(reason.figures['largest_budget_bytes'])}); device {label} can, but is {status}")
        return WaitReason(DEVICE_OFFLINE, text, device=label,
                          figures={**reason.figures, "peak_bytes": float(peak_bytes),
                                   "device_budget_bytes": float(budget), "device_status": status})
    if reason.kind == NO_DEVICE and unavailable:
        states = ", ".join(f"{label} {status}" for label, _, status in unavailable)
        return WaitReason(NO_DEVICE, f"no device is online ({states})", figures={"online_devices": 0})
    return reason
