#!/usr/bin/env python
"""Telemetry load check (loopback only): N simulated jobs publish memory samples at R Hz through the
workers' real Redis link, the real control consumer (``manage.py runconsumer``) stores the downsampled
timeline, and this script prints the consumer's lag every interval and whether it grows.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/zico_load REDIS_URL=redis://127.0.0.1:6379/9 \
        .venv/bin/python scripts/load/telemetry_load.py --jobs 100 --hz 10 --seconds 300

Lag figures per interval:
- ``stream lag``: entries in ``zico:telemetry`` not yet delivered to the consumer group (XINFO GROUPS
  ``lag``, Redis >= 7) plus delivered-but-unacknowledged ``pending`` ones;
- ``db lag s``: now minus the newest stored second of the device timeline (includes the downsampler's
  deliberate ~2 s hold-back, so about 2-3 s is the floor).
"Without growing lag" means the last minute's mean lag is no more than the first minute's plus a small
allowance. Exits 1 if the lag grows or the consumer dies. The database must be PostgreSQL; it is created
and migrated if missing. It uses its own Redis db index (deletes only Zico's keys there).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

from loadcheck import REPO, ensure_database, loopback_only  # scripts/load/ is sys.path[0]

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/zico_load")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.settings")
HOST = "loadhost"
JOBS_PER_DEVICE = 10


def _seed(n_jobs: int) -> tuple[list[str], list[int]]:
    """Tenant, devices (10 jobs each) and running jobs; returns device keys and job ids."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from zico.cluster.models import Device, Node
    from zico.jobs.models import Job
    from zico.telemetry.models import TimelinePoint
    from zico.tenants.models import Role, Tenant

    user, _ = get_user_model().objects.get_or_create(username="load-owner")
    tenant, created = Tenant.objects.get_or_create(slug="load", defaults={"name": "Load"})
    if created:
        tenant.add_member(user, Role.OWNER)
    node, _ = Node.objects.get_or_create(host=HOST)
    n_dev = (n_jobs + JOBS_PER_DEVICE - 1) // JOBS_PER_DEVICE
    devs = []
    for i in range(n_dev):
        d, _ = Device.objects.get_or_create(node=node, kind="cpu", index=i, defaults={
            "name": "load pool", "total_bytes": 64 << 30, "budget_bytes": 48 << 30})
        devs.append(f"cpu.{HOST}.{i}")
    TimelinePoint.objects.filter(device__node=node).delete()
    jobs = []
    for k in range(n_jobs):
        j = Job.objects.create(tenant=tenant, owner=user, name=f"load-{k}", workload="digits-cnn", params={})
        Job.objects.filter(pk=j.pk).update(status="running")
        jobs.append(j.pk)
    return devs, jobs


def _publisher(devs, jobs, hz, seconds, stop, sent):
    """One thread: every 1/hz s, one sample per job and one per device, through workers.link.Link."""
    from workers.link import Link

    links = {d: Link(os.environ["REDIS_URL"], d) for d in devs}
    period = 1.0 / hz
    t_end = time.time() + seconds
    tick = 0
    while not stop.is_set() and time.time() < t_end:
        now = time.time()
        for di, dev in enumerate(devs):
            mine = jobs[di * JOBS_PER_DEVICE:(di + 1) * JOBS_PER_DEVICE]
            samples = [{"job": j, "device": dev, "t": now, "allocated": (1 << 28) + (tick % 50) * (1 << 22),
                        "reserved": 1 << 30, "iteration": tick // 10, "iterations": 10**6, "phase": "forward"}
                       for j in mine]
            samples.append({"job": None, "device": dev, "t": now, "allocated": len(mine) << 28,
                            "reserved": len(mine) << 30, "device_used": len(mine) << 30, "budget": 48 << 30,
                            "jobs": mine})
            links[dev].publish_samples(samples)
            sent[0] += len(samples)
        tick += 1
        time.sleep(max(0.0, period - (time.time() - now)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between lag readings")
    args = ap.parse_args()
    if not (1 <= args.jobs <= 2000 and 0 < args.hz <= 50 and 10 <= args.seconds <= 3600):
        sys.exit("--jobs in [1, 2000], --hz in (0, 50], --seconds in [10, 3600]")
    loopback_only(os.environ["REDIS_URL"])
    loopback_only(os.environ["DATABASE_URL"])
    ensure_database(os.environ["DATABASE_URL"])

    import redis

    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    for k in r.scan_iter("zico:*"):
        r.delete(k)
    devs, jobs = _seed(args.jobs)
    consumer = subprocess.Popen([sys.executable, "manage.py", "runconsumer", "--max-seconds",
                                 str(args.seconds + 60)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    from zico_contracts import keys
    from zico.telemetry.models import TimelinePoint

    stop, sent = threading.Event(), [0]
    pub = threading.Thread(target=_publisher, args=(devs, jobs, args.hz, args.seconds, stop, sent), daemon=True)
    t0 = time.time()
    pub.start()
    print(f"{args.jobs} jobs x {args.hz:g} Hz on {len(devs)} devices for {args.seconds:.0f} s "
          f"(~{args.jobs * args.hz + len(devs) * args.hz:.0f} samples/s)")
    print(f"{'t s':>6} {'sent/s':>8} {'stream lag':>11} {'db lag s':>9} {'rows':>8}")
    rows = []
    last_sent, last_t = 0, t0
    try:
        while pub.is_alive():
            time.sleep(args.interval)
            if consumer.poll() is not None:
                print("control consumer died:\n" + consumer.stderr.read()[-2000:])
                return 1
            now = time.time()
            info = {g["name"].decode(): g for g in r.xinfo_groups(keys.TELEMETRY_STREAM)}
            g = info.get(keys.CONTROL_GROUP, {})
            lag = int(g.get("lag") or 0) + int(g.get("pending") or 0)
            newest = TimelinePoint.objects.filter(device__node__host=HOST, job__isnull=True).order_by(
                "-second").values_list("second", flat=True).first()
            db_lag = now - newest if newest else float("nan")
            n_rows = TimelinePoint.objects.filter(device__node__host=HOST).count()
            rate = (sent[0] - last_sent) / (now - last_t)
            last_sent, last_t = sent[0], now
            rows.append((now - t0, lag, db_lag))
            print(f"{now - t0:6.0f} {rate:8.0f} {lag:11d} {db_lag:9.1f} {n_rows:8d}", flush=True)
    finally:
        stop.set()
        consumer.terminate()
        consumer.wait(timeout=30)

    window = max(1, int(60 / args.interval))
    first = statistics.mean(x[2] for x in rows[:window])
    last = statistics.mean(x[2] for x in rows[-window:])
    first_q = statistics.mean(x[1] for x in rows[:window])
    last_q = statistics.mean(x[1] for x in rows[-window:])
    grows = last > first + 2.0 or last_q > first_q + args.jobs * args.hz  # > 1 s of samples backed up
    print(f"db lag: first minute {first:.1f} s, last minute {last:.1f} s; stream backlog: first {first_q:.0f}, "
          f"last {last_q:.0f} entries -> {'LAG GROWS' if grows else 'no growing lag'}")
    return 1 if grows else 0


if __name__ == "__main__":
    sys.exit(main())
