"""The device agent: one per device, inside the device worker process; every job runs as its own OS process.

* :mod:`.settings` — the agent's knobs (timeouts, grace period, bypass margin), read from the environment once.
* :mod:`.pool` — the device's memory pool as the agent holds it (the allocator's ``AgentPool`` when the binding
  has it, else each job bounded by the device budget in its own process).
* :mod:`.launch` — one job process: launch with inherited sockets, read its messages, tail its stderr, stop it.
* :mod:`.output` — a job's stdout/stderr cut into lines of bounded size, admitted at a rate (``JobRun.on_output``).
* :mod:`.sandbox` — the bubblewrap sandbox of a job: its command line, uid, limits, directories; :mod:`.seccomp`,
  the filter that keeps it on its CPU slot's cores.
* :mod:`.agent` — :class:`DeviceAgent`: the coordinator gate for every job, watchdogs, the outcome of each run.
* :mod:`.diskwatch`, :mod:`.shmwatch` — what a job's directories hold on disk; the shared memory its processes
  hold outside the pool (both stop a job past its limit).
* :mod:`.lock` — one agent per device (an ``flock`` that dies with its holder).

The control protocol between agent and job is :mod:`zico_contracts.agent`; the job's side is
:mod:`workers.job.control`, used by the job process :mod:`workers.job.entry` (a user's own script, spec
:mod:`zico_contracts.userjob`, or the catalog project), the one job process of every job.
"""
from .agent import SUPERSEDED, DeviceAgent, JobRun
from .lock import DeviceLocked, lock_device
from .settings import AgentSettings

__all__ = ["SUPERSEDED", "DeviceAgent", "JobRun", "AgentSettings", "DeviceLocked", "lock_device"]
