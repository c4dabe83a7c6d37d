"""Starting a device worker: one process per device, Celery threads pool, the device agent created first.

The documented way (see docs/workers.md)::

    python -m workers.bootstrap --kind gpu --index 0 --slots 2
    python -m workers.bootstrap --kind cpu --capacity 3GiB --slots 2 [--budget 2GiB]

It consumes ``gpu.<host>.<index>`` (or ``cpu.<host>``) with ``--slots`` threads (the most jobs that may share
the device; each task thread waits for its job's process). At Celery's ``worker_init`` — in the main process,
before any task is fetched — it describes the device (NVML, or the configured CPU capacity), creates the
device's coordinator and its agent (:class:`workers.agent.DeviceAgent`: the device's one memory pool, which
every job process draws on, and the watchdogs), registers the device (``worker_up``) and starts the reporter
(samples at 5 Hz, heartbeats every second). The worker process itself never initialises CUDA: each job's
process does, after installing its allocator client (Note [Allocator before CUDA, and never in a forked
child] in :mod:`workers.job.control`).
The worker never opens the database and never loads Django: its Celery app (:mod:`workers.celery_app`) and its
settings (Redis, host, directories: :mod:`workers.env`) come from the environment.
"""
from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

log = logging.getLogger("workers.bootstrap")

_config = None  # WorkerConfig of this process, set by main() before Celery starts
_reporter = None
_lock_fd = None  # the device lock (workers.agent.lock), released by the kernel when this process dies


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from placement.gating import DEFAULT_GATE_HEADROOM

    from .nvml import parse_bytes

    p = argparse.ArgumentParser(prog="python -m workers.bootstrap", description="Start one Zico device worker.")
    p.add_argument("--kind", choices=("gpu", "cpu"), required=True, help="device kind")
    p.add_argument("--index", type=int, default=0, help="GPU index (NVML/CUDA order); 0 for the CPU pool")
    p.add_argument("--slots", type=int, default=2, help="most jobs sharing the device (threads), default 2")
    p.add_argument("--capacity", type=parse_bytes, default=None,
                   help="CPU pool capacity, e.g. 3GiB (required with --kind cpu)")
    p.add_argument("--budget", type=parse_bytes, default=None, help="initial budget in bytes (default: total)")
    p.add_argument("--host", default=None, help="host name in queue names (default: ZICO_HOST)")
    p.add_argument("--checkpoint-every", type=float, default=5.0, help="seconds between job checkpoints")
    p.add_argument("--gate-headroom", type=float, default=None,
                   help="share of the budget the coordinator keeps free, for a new device row (default "
                        f"{DEFAULT_GATE_HEADROOM}); like --budget it only seeds the row: the worker then uses the "
                        "row's figure, and the scheduler plans the device's groups against the rest")
    p.add_argument("--loglevel", default="INFO")
    args = p.parse_args(argv)
    if args.kind == "cpu" and not args.capacity:
        p.error("--capacity is required with --kind cpu (e.g. --capacity 3GiB)")
    if args.slots < 1:
        p.error("--slots must be >= 1")
    if args.index < 0:
        p.error("--index must be >= 0")
    if args.gate_headroom is not None and not 0 <= args.gate_headroom < 1:
        p.error("--gate-headroom must lie in [0, 1)")
    return args


def build_config(args: argparse.Namespace):
    from . import env
    from .device import WorkerConfig

    return WorkerConfig(kind=args.kind, host=args.host or env.host(), index=args.index if args.kind == "gpu"
                        else 0, slots=args.slots, capacity_bytes=args.capacity, budget_bytes=args.budget,
                        redis_url=env.redis_url(), checkpoint_dir=env.checkpoint_dir(),
                        data_dir=env.data_dir(), checkpoint_every_s=args.checkpoint_every,
                        gate_headroom=args.gate_headroom, var_dir=env.var_dir())


FORKING_POOL_MESSAGE = ("a Zico device worker runs Celery's threads pool only (-P threads): its jobs draw on the "
                        "one memory pool and coordinator of the device agent in this process, and a forked pool "
                        "process would hold a second agent with the full budget")


def check_pool(pool_cls) -> None:
    """Refuse any Celery pool but threads (prefork, eventlet, gevent, solo...). Raises SystemExit."""
    name = getattr(pool_cls, "__module__", "") + "." + getattr(pool_cls, "__name__", str(pool_cls))
    if "celery.concurrency.thread" not in name:
        raise SystemExit(f"refusing to start: pool {name}: {FORKING_POOL_MESSAGE}")


def start_device(config) -> None:
    """Describe the device, start its coordinator and agent (the pool), the reporter, and register."""
    global _reporter
    from placement.coordinator import Coordinator
    from placement.gating import DEFAULT_GATE_HEADROOM, gate_share

    from .agent import AgentSettings, DeviceAgent
    from .device import DeviceRuntime, describe, set_runtime
    from .link import Link
    from .reporter import Reporter

    info = describe(config)
    budget = min(config.budget_bytes or info.total_bytes, info.total_bytes)
    headroom = DEFAULT_GATE_HEADROOM if config.gate_headroom is None else config.gate_headroom
    coordinator = Coordinator(gate_share(headroom) * budget)  # the row's headroom follows (Reporter.tick)
    settings, disks = job_disks(config, AgentSettings.from_env())
    agent = DeviceAgent(config.torch_device, info.total_bytes, budget, coordinator, settings,
                        slots=config.slots)  # a CPU device's cores divided among its slots (zico_contracts.cpushare)
    link = Link(config.redis_url, config.device)
    rt = DeviceRuntime(config, info, agent, link)
    rt.disks = disks
    rt.budget_bytes = budget
    set_runtime(rt)
    link.emit("worker_up", started_at=time.time(), **rt.registration())
    _reporter = Reporter(rt)
    _reporter.tick()  # register and beat at once, before the first task
    _reporter.start()
    log.info("device worker %s ready: %s, %d bytes total, budget %d, %d slot(s), pid %d", config.device,
             info.name, info.total_bytes, budget, config.slots, rt.pid)


def job_disks(config, settings):
    """``(settings with the job disk limit fitted to this host, the workers.jobdisk.JobDisks of this worker)``:
    decided once here and logged (Note [A job's disk] in workers.agent.diskwatch)."""
    from zico_contracts.oom import format_bytes

    from .jobdisk import QUOTA, JobDisks

    jobs_dir = Path(config.var_dir or config.checkpoint_dir.parent) / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    settings, why = settings.fit_disk(shutil.disk_usage(jobs_dir).free, config.slots)
    disks = JobDisks.for_worker(jobs_dir.parent, config.device, settings.disk_bytes)
    log.info("a job's disk limit on %s: %s, %d bytes (%s)", config.device, format_bytes(settings.disk_bytes),
             settings.disk_bytes, why)
    if disks.bound == QUOTA:
        log.info("each job's directories on %s are a file system of that size of their own (a quota: mkfs, "
                 "mount and unmount took %.0f ms at start)", config.device, disks.start_ms)
    else:
        log.warning("no disk quota per job on %s: %s; the disk watch alone bounds a job's directories "
                    "(a fast writer passes the limit by what it writes in a second)", config.device, disks.why)
    return settings, disks


def check_allocator_knobs() -> None:
    """Exit (status 2) naming every malformed ZICO_* allocator knob, before Celery starts: the allocator
    would refuse to install anyway (Note [Malformed knobs fail the first install] in allocator/src/options.hpp).
    Loads only the core library, which touches no device."""
    from zico_allocator import _native

    bad = _native.config_error()
    if bad:
        sys.stderr.write(f"python -m workers.bootstrap: {bad}\n")
        raise SystemExit(2)


def stop_device() -> None:
    from .device import runtime

    if _reporter is not None:
        try:
            rt = runtime()
            rt.link.emit("worker_down")
            rt.agent.close()
        except RuntimeError:
            pass
        _reporter.stop()


def _after_fork_in_child() -> None:
    # Note [Allocator before CUDA, and never in a forked child]: a child of a device worker must not use the
    # device; hide it so torch in the child cannot initialise CUDA on it.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["ZICO_FORKED_FROM_DEVICE_WORKER"] = "1"


def _connect_signals() -> None:
    from celery import signals

    @signals.worker_init.connect(weak=False)
    def _on_worker_init(sender=None, **_kw):
        check_pool(getattr(sender, "pool_cls", None))
        # Celery logs and swallows a receiver's exception, which would leave a worker taking tasks with no
        # device behind it: a failed start ends the process instead (nothing was fetched yet).
        try:
            start_device(_config)
        except Exception:
            log.critical("device worker %s could not start", _config.device, exc_info=True)
            logging.shutdown()
            os._exit(1)

    @signals.worker_shutdown.connect(weak=False)
    def _on_worker_shutdown(**_kw):
        stop_device()


def main(argv: list[str] | None = None) -> None:
    global _config
    args = parse_args(argv)
    from zico_contracts.queues import device_queue

    from . import env
    from .celery_app import make_app

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=env.log_level())
    try:
        app = make_app()
    except ValueError as exc:
        raise SystemExit(f"refusing to start: {exc}") from None
    from . import tasks  # noqa: F401  (registers zico.device.* on the app)
    from .celery_fixes import patch_kombu_redis_collected_channel

    patch_kombu_redis_collected_channel()  # Note [Celery worker dies when Redis restarts]

    _config = build_config(args)
    check_allocator_knobs()
    from .agent import DeviceLocked, lock_device

    try:
        global _lock_fd
        _lock_fd = lock_device(_config.var_dir, _config.device)  # held (open) for the process's life
    except DeviceLocked as exc:
        raise SystemExit(f"refusing to start: {exc}") from None
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>` dumps every thread's stack
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _connect_signals()
    queue = device_queue(_config.kind, _config.host, _config.index)
    app.worker_main([
        "worker", "--pool", "threads", "--concurrency", str(_config.slots), "--queues", queue,
        "--hostname", f"zico-{_config.device}@%h", "--loglevel", args.loglevel,
        "--without-gossip", "--without-mingle", "--prefetch-multiplier", "1",
    ])


if __name__ == "__main__":
    main(sys.argv[1:])
