"""Scale benchmark of the scheduler service's round against the real PostgreSQL and Redis:
1,000 jobs with stored curves (``queued`` by default, so the round also moves them to
``ready``; ``--status ready`` skips that) and 256 devices in a throwaway database, one round of
``Scheduler.run_round`` with the FIFO baseline and with the memory-aware policy (fresh data for
each), timed and printed with the memory-aware figures as ratios to the baseline, with the
round's SQL query count and its seconds per step (``RoundResult.timings``). Wall time stretches with
the load of a shared machine, so each round also prints its CPU time: this process's (per step too,
``RoundResult.cpu_timings``) and, when the server is local and its /proc readable, that of the
round's PostgreSQL backend; on an idle machine the round takes about their sum. The memory-aware policy
has the service's planning budget (``ZICO_ROUND_PLANNING_BUDGET_S``, or ``--planning-budget``): when its first
round leaves jobs for later (Note [Planning budget] in placement.policies), the rounds that continue it are run
and printed too, until the decision is complete.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/zico_place REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python scripts/bench_scheduler_round.py [--jobs 1000] [--devices 256] [--status queued] \\
        [--max-group 2] [--planning-budget 0.3|off]

The database ``test_<name>`` is created and dropped; the tasks go to Redis on queues of a
unique host, deleted at the end.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.test_settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

GiB = 1 << 30


def fill(n_jobs: int, n_devices: int, host: str, status: str, seed: int = 0) -> None:
    """Tenants, a node per 8 devices, jobs in ``status`` with curves (12 workloads)."""
    from placement.curves import triangular_curve
    from zico.cluster.models import Device, Node
    from zico.jobs.models import Job, MemoryProfile
    from zico.tenants.models import Tenant

    rng = random.Random(seed)
    tenants = [Tenant.objects.create(name=f"T{i}", slug=f"t{i}-{host}", max_running_jobs=1000,
                                     share_weight=rng.choice([1, 2, 4]), allow_cross_tenant_colocation=i % 2 == 0)
               for i in range(10)]
    for n in range(0, n_devices, 8):
        node = Node.objects.create(host=f"{host}-{n // 8}")
        for i in range(min(8, n_devices - n)):
            total = rng.choice([40, 80, 141]) * GiB
            Device.objects.create(node=node, index=i, kind="gpu", name="bench", uuid=f"GPU-{host}-{n + i}",
                                  total_bytes=total, budget_bytes=total)
    curves = []
    for _ in range(12):
        m0 = rng.uniform(1, 8) * GiB
        c = triangular_curve(m0, m0 + rng.uniform(2, 30) * GiB, rng.choice([0.05, 0.1, 0.2, 0.4, 0.8]),
                             forward_fraction=rng.uniform(0.3, 0.7))
        c.meta["compute_share"] = rng.choice([0.3, 0.5, 0.7])
        curves.append(c)
    for i in range(n_jobs):
        job = Job.objects.create(tenant=rng.choice(tenants), workload="digits-cnn", params={"iterations": 500},
                                 status=status, priority=rng.choice([0, 0, 1]))
        MemoryProfile.record(job, rng.choice(curves))


def clear() -> None:
    from zico.cluster.models import Node, Placement
    from zico.jobs.models import Event, Job
    from zico.tenants.models import Tenant

    Placement.objects.all().delete()
    Event.objects.all().delete()
    Job.objects.all().delete()
    Node.objects.all().delete()
    Tenant.objects.all().delete()


def backend_cpu_s() -> float | None:
    """CPU seconds (user + system) of this connection's PostgreSQL backend so far, from /proc; None when the
    server is not on this machine or its process cannot be read."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(policy, n_jobs: int, n_devices: int, status: str) -> dict:
    """The first round on fresh data, timed; ``more``: the rounds that continue a decision it cut short."""
    from zico.scheduling.service import Scheduler

    host = f"bench{uuid.uuid4().hex[:6]}"
    clear()
    fill(n_jobs, n_devices, host, status)
    connection.queries_log.clear()  # the log keeps 9,000 queries: a full one would hide the round's
    scheduler = Scheduler(policy)
    first, res = timed(scheduler)
    more, queues = [], {q for _, _, q in res.sent}
    while getattr(res, "deferred", 0):  # absent in older code
        r, res = timed(scheduler)
        more.append(r)
        queues |= {q for _, _, q in res.sent}
    return {**first, "queues": sorted(queues), "more": more}


def timed(scheduler) -> tuple[dict, object]:
    """One ``run_round``: its figures (wall and CPU seconds, SQL queries, placed, left for later, per step) and
    its result."""
    pg0 = backend_cpu_s()
    with CaptureQueriesContext(connection) as queries:
        t0, cpu0 = time.perf_counter(), time.process_time()
        res = scheduler.run_round()
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    pg1 = backend_cpu_s()
    return {"wall": dt, "cpu": cpu, "pg_cpu": None if pg0 is None or pg1 is None else pg1 - pg0,
            "queries": len(queries.captured_queries), "placed": len(res.placed),
            "deferred": getattr(res, "deferred", 0),
            # absent in older code (before the bulk round, 63d1874; before per-step CPU), for comparisons
            "timings": getattr(res, "timings", {}), "cpu_timings": getattr(res, "cpu_timings", {}),
            "load": os.getloadavg()[0]}, res


def steps(timings: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in timings.items())


def cpu(r: dict) -> str:
    pg = "" if r["pg_cpu"] is None else f" + PostgreSQL backend {r['pg_cpu']:.2f} s"
    return f"CPU: scheduler {r['cpu']:.2f} s{pg}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=256)
    ap.add_argument("--status", choices=["queued", "ready"], default="queued",
                    help="the jobs' status before the round (queued: the round also moves them to ready)")
    ap.add_argument("--max-group", type=int, default=2, help="most jobs per device for the memory-aware policy")
    ap.add_argument("--planning-budget", default=None,
                    help="CPU seconds of new plans per round, or off (default: ZICO_ROUND_PLANNING_BUDGET_S)")
    args = ap.parse_args()
    budget = getattr(settings, "ZICO_ROUND_PLANNING_BUDGET_S", None) if args.planning_budget is None else \
        None if args.planning_budget == "off" else float(args.planning_budget)
    import redis

    from placement.policies import FirstFitFifo, MemoryAware

    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    queues: list[str] = []
    try:
        base = one_round(FirstFitFifo(), args.jobs, args.devices, args.status)
        queues = base["queues"]
        kw = {} if budget is None else {"planning_budget_s": budget}  # older code has no budget
        zico = one_round(MemoryAware(max_group=args.max_group, **kw), args.jobs, args.devices, args.status)
        queues += zico["queues"]
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        r = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        for q in queues:
            r.delete(q)
    print(f"one scheduling round, {args.jobs} {args.status} jobs, {args.devices} empty devices "
          f"(PostgreSQL + Redis, cold plan cache, memory-aware groups of up to {args.max_group}, planning budget "
          f"{'off' if budget is None else f'{budget:g} s'})")
    print(f"  fifo first-fit (baseline)  {base['wall']:7.2f} s  placed {base['placed']}, {base['queries']} SQL queries; "
          f"{cpu(base)}; load {base['load']:.1f}")
    print(f"  memory-aware               {zico['wall']:7.2f} s  placed {zico['placed']}, {zico['queries']} SQL queries  "
          f"({zico['wall'] / base['wall']:.2f}x baseline, {zico['wall'] / max(zico['placed'], 1) * 1000:.2f} ms per "
          f"placed job); {cpu(zico)}; load {zico['load']:.1f}")
    for k, r in enumerate(zico["more"], 2):
        print(f"  memory-aware, round {k}       {r['wall']:7.2f} s  placed {r['placed']} more; {cpu(r)}; "
              f"load {r['load']:.1f}; left for later {r['deferred']}")
    if zico["more"]:
        rounds = [zico] + zico["more"]
        both = [r["cpu"] + (r["pg_cpu"] or 0.0) for r in rounds]
        print(f"  memory-aware: the first round left {zico['deferred']} jobs for later; {len(rounds)} rounds placed "
              f"{sum(r['placed'] for r in rounds)}; CPU per round (scheduler + PostgreSQL backend) "
              f"{min(both):.2f}-{max(both):.2f} s, {sum(both):.2f} s in all; wall "
              f"{sum(r['wall'] for r in rounds):.2f} s in all")
    print(f"  seconds per step, fifo:         {steps(base['timings'])}")
    print(f"  seconds per step, memory-aware: {steps(zico['timings'])}")
    if zico["cpu_timings"]:
        print(f"  CPU seconds per step, fifo:         {steps(base['cpu_timings'])}")
        print(f"  CPU seconds per step, memory-aware: {steps(zico['cpu_timings'])}")


if __name__ == "__main__":
    sys.exit(main())
