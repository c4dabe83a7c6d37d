"""A CPU device's compute divided among its slots: which cores and how many threads each job process gets.

Written once here for both sides: the device agent computes a job's share at launch (:func:`slot_share`) and
hands it over in the environment (:func:`job_environment`); the job process's entry pins itself to those cores
before torch loads (:func:`pin_from_environment`); the run's metrics carry the share (:data:`METRIC`,
:meth:`SlotShare.to_dict`) and the pages show it (:func:`describe`).

Note [Compute per slot]
    On a GPU, co-located jobs share the SMs by time slicing or MPS; on a CPU device every job process would
    otherwise start torch's default thread pool (one thread per core), so two co-located jobs fight for
    every core and each runs several times slower than its plan says. So a CPU device's cores are divided
    among its *slots* (the worker's ``--slots``: the most jobs that may share the device), as MPS's
    active-thread percentage divides a GPU: a job in slot ``i`` of ``n`` on ``c`` cores gets
    ``k = c // n`` cores, ``cpus[i*k + j]`` for ``j < k``, pinned with CPU affinity where the host allows,
    and ``k`` threads for torch, OpenMP and MKL (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, which torch's
    intra-op pool reads). The share is fixed for the job's life and is the same whether the
    job runs alone, beside others, or is profiled: a profile's iteration time then holds beside neighbours
    (they compute on other cores) and a job that ran alone shows slowdown 1.0. The price: a job alone on
    the device uses only its slot's cores. Sizing the share by the plan's group instead would give a job
    placed alone all cores, which a job placed beside it later cannot take back, and would make every
    profile (run alone) faster than the same job's run in a group. When the cores do not divide evenly
    among the slots (3 slots on 2 cores), every slot gets all the cores and ``max(1, c // n)`` threads: the
    kernel then shares the cores evenly among the jobs computing, as the contention model says
    (``max(1, sum of shares)`` for all, Note [Contention model] in placement.device_sim); pinning slots
    round-robin instead put two jobs on one core and one alone on the other (2.1-2.3x against 1.1-1.2x where
    the model says 1.5x for each: docs/experiment.md). A job's own setting of a thread variable (its ``env``) is kept and reported; its
    cores stay its slot's.

Standard library only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

METRIC = "cpu_share"  # the key in a run's metrics
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch's intra-op pool, OpenMP and MKL read
CPUS_ENV = "ZICO_CPUS"  # the job's cores as the worker chose them, comma-separated ("0,1")


@dataclass(frozen=True)
class SlotShare:
    """One job's share of a CPU device: ``slot`` (0-based) of ``slots``, ``cores`` the device has, ``cpus``
    (the core ids it is pinned to), ``threads`` (its thread count), ``user_set`` (thread variables the job's
    own ``env`` set, kept as the job gave them)."""

    slot: int
    slots: int
    cores: int
    cpus: tuple[int, ...]
    threads: int
    user_set: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "slots": self.slots, "cores": self.cores, "cpus": list(self.cpus),
                "threads": self.threads, "user_set": list(self.user_set)}


def slot_share(cpus: Sequence[int], slots: int, slot: int) -> SlotShare:
    """The share of slot ``slot`` (0-based) of ``slots`` on a device of cores ``cpus`` (the worker's own
    affinity, ``os.sched_getaffinity(0)``), Note [Compute per slot]. Raises ValueError naming the bad
    argument."""
    cpus = sorted(int(c) for c in cpus)
    if not cpus:
        raise ValueError("cpus: expected at least one core, got none")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots: expected an integer >= 1, got {slots!r}")
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < slots:
        raise ValueError(f"slot: expected an integer in [0, {slots}), got {slot!r}")
    k = max(1, len(cpus) // slots)
    if len(cpus) % slots:  # uneven: every slot shares all the cores (Note [Compute per slot])
        return SlotShare(slot, slots, len(cpus), tuple(cpus), k)
    return SlotShare(slot, slots, len(cpus), tuple(cpus[slot * k:(slot + 1) * k]), k)


def job_environment(share: SlotShare, job_env: Mapping[str, str] | None) -> tuple[dict[str, str], SlotShare]:
    """``(variables, share)``: the environment the worker sets for a job of ``share`` (its cores in
    :data:`CPUS_ENV`, ``threads`` in every :data:`THREAD_VARS` unless the job's own ``job_env`` sets any of
    them: then none, the job's choice is whole), and the share with ``user_set`` naming the ones it sets."""
    user = tuple(v for v in THREAD_VARS if v in (job_env or {}))
    env = {CPUS_ENV: ",".join(map(str, share.cpus))}
    if not user:  # one of them set by the job leaves all to it (torch reads both: MKL's would cap OpenMP's)
        env.update({v: str(share.threads) for v in THREAD_VARS})
    return env, SlotShare(share.slot, share.slots, share.cores, share.cpus, share.threads, user)


def describe(share: Mapping[str, Any], job_env: Mapping[str, str] | None = None) -> str:
    """One line for a job's log and page: ``"1 of 2 cores (CPU 1), 1 thread (slot 2 of 2)"``, plus what the
    job's own setting kept (``job_env`` gives the values) when ``user_set`` names any."""
    cpus = share.get("cpus") or []
    threads = share.get("threads")
    line = (f"{len(cpus)} of {share.get('cores')} cores (CPU {','.join(map(str, cpus))}), {threads} "
            f"thread{'s' if threads != 1 else ''} (slot {int(share.get('slot', 0)) + 1} of {share.get('slots')})")
    user = share.get("user_set") or []
    if user:
        kept = ", ".join(f"{v}={(job_env or {}).get(v, '?')}" if job_env else v for v in user)
        line += f"; the job's own {kept} kept instead of {threads}"
    return line


def pin_from_environment() -> str | None:
    """In the job process, before torch loads: pin it to the cores in :data:`CPUS_ENV` (its threads and
    children inherit them). Returns why it could not (the host refuses affinity, a malformed value), None
    when pinned or when the variable is absent (not a CPU device, or launched by hand)."""
    value = os.environ.get(CPUS_ENV)
    if not value:
        return None
    try:
        cpus = {int(c) for c in value.split(",")}
        if os.sched_getaffinity(0) != cpus:  # a sandboxed job is pinned from outside, and may not change it
            os.sched_setaffinity(0, cpus)
    except (ValueError, OSError, AttributeError) as exc:
        return f"{CPUS_ENV}={value}: not pinned ({exc})"
    return None
