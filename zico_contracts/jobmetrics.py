"""The names in a run's metrics that the platform measures, so that a job's own figures (``zico.log``) cannot take
them; shared by the job-side API (``zico_job``), the job process, the device agent and the worker's runner.

Job code is untrusted and runs in the job process beside the runtime that reports its figures, so what crosses
from that process is only the job's word. Two kinds of platform names:

- ``RUNTIME_METRICS``: figures the job process's runtime reports in its ``done`` message (``workers.job.entry``):
  iterations, run and train seconds, the allocator's peaks. They travel in the job's message; the device agent
  takes the larger of its own and the job's peaks (``workers.agent.agent``), so a job can only overstate them.
- ``WORKER_METRICS``: figures the device agent and the worker measure outside the job process (gate delays, the
  measured compute share, slowdowns, output files, the resident memory seen from outside). The agent drops
  these names from whatever the job process sends (``without_worker_metrics``) before it adds its own, so a job
  can neither set them nor leave a forged one where the worker has none (a compute share it did not measure
  would steer the scheduler: ``zico_contracts.computeshare``).

``check_user_metric`` is the rule ``zico.log`` applies to a name: the job learns at once, with the name, rather
than finding its figure overwritten or dropped. Standard library only.
"""
from __future__ import annotations

from typing import Any

from zico_contracts.computeshare import METRIC as COMPUTE_SHARE
from zico_contracts.cpushare import METRIC as CPU_SHARE
from zico_contracts.jobbudget import REFUSALS_METRIC as JOB_BUDGET_REFUSALS

RUNTIME_METRICS = frozenset({
    "iterations_done", "run_s", "train_s", "iterations_per_s", "gate_delay_s", "gate_waits",
    "peak_allocated_bytes", "peak_reserved_bytes",
})
WORKER_METRICS = frozenset({
    COMPUTE_SHARE, CPU_SHARE, "delays", "delay_s", "delay_max_s", "gate_wait_s", "peak_rss_anon_bytes",
    "peak_shared_bytes", "peak_disk_bytes", "wall_s", "pid",
    "mean_iteration_s", "solo_iteration_s", "slowdown", "slowdown_run", "predicted_slowdown",
    "beside_iteration_s", "iterations_beside",
    "output_files", "output_bytes", "output_skipped", "output_skipped_count",
    "environment",  # the job's own environment (workers.jobenv): key, packages, build time
    JOB_BUDGET_REFUSALS,  # allocations the agent pool refused for the job's own budget (zico_contracts.jobbudget)
})
PLATFORM_METRICS = RUNTIME_METRICS | WORKER_METRICS
NAME_MAX_CHARS = 100  # the web side stores a metric's name in at most this many characters


def check_user_metric(name: Any) -> str:
    """``name`` as a job's own metric name. Raises ValueError when it is not a non-empty string of at most
    ``NAME_MAX_CHARS`` characters, or is one of the platform's names (``PLATFORM_METRICS``)."""
    if not isinstance(name, str) or not name or len(name) > NAME_MAX_CHARS:
        raise ValueError(f"zico.log: a metric name is a string of 1 to {NAME_MAX_CHARS} characters, "
                         f"got {name!r:.60}")
    if name in PLATFORM_METRICS:
        raise ValueError(f"zico.log: {name!r} is a figure the platform measures for every job; "
                         f"log it under another name (e.g. 'my_{name}')")
    return name


def without_worker_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` (a job process's ``done`` metrics) without the names in ``WORKER_METRICS``; a new dict."""
    return {k: v for k, v in metrics.items() if k not in WORKER_METRICS}
