"""Benchmark of the submission check (zico.jobs.known.misfit, Note [Known memory needs]) against the real
PostgreSQL: what a submission pays to be judged on what is stored, per path, as a ratio to the path that
stops at an identical job's measured profile (the check as it was before estimates and remembered failures
were read), all measured in this run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/zico_bench .venv/bin/python scripts/bench_submit_check.py \\
        [--calls 200] [--jobs 2000]

Paths: ``profile`` (an identical job's profile decides), ``miss`` (no profile, failure or estimate stored: all three
sources read), ``estimate`` (a stored estimate decides: the estimate cache hit, read from a folder of this run).
The database ``test_<name>`` is created and dropped; ``--jobs`` earlier jobs (a third with profiles, a tenth failed
with a remembered failure) make the queries realistic. Needs one real estimate first (a child ``manage.py curve
estimate``, seconds), which is not timed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.test_settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def fill(n_jobs: int) -> None:
    from placement.curves import triangular_curve
    from zico.cluster.models import Device, Node
    from zico.jobs.models import Job, MemoryProfile
    from zico.tenants.models import Tenant

    node = Node.objects.create(host="bench")
    for i in range(8):
        Device.objects.create(node=node, index=i, kind="gpu", name="GPU", uuid=f"GPU-b-{i}", total_bytes=80 << 30,
                              budget_bytes=72 << 30)
    tenant = Tenant.objects.create(name="T", slug="t")
    jobs = Job.objects.bulk_create([Job(tenant=tenant, workload="digits-cnn", params={"batch_size": 8 + i % 500,
                                                                                      "iterations": i})
                                    for i in range(n_jobs)])
    MemoryProfile.objects.bulk_create([MemoryProfile(job=j, source="estimate", curve=triangular_curve(1 << 30, 2 << 30).to_dict(),
                                                     peak_bytes=2 << 30, persistent_bytes=1 << 30, iteration_s=1.0)
                                       for j in jobs[::3]])
    Job.objects.filter(pk__in=[j.pk for j in jobs[1::10]]).update(
        status="failed", metrics={"profile_failure": {"kind": "error", "reason": "FloatingPointError: nan"}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2000)
    a = ap.parse_args()
    from zico_workloads.catalog import validate_params
    from zico.jobs.known import ESTIMATE_DEVICE, misfit
    from zico.jobs.models import Job, MemoryProfile

    cache = Path(tempfile.mkdtemp(prefix="zico-bench-estimates-"))
    estimated = {"batch_size": 4, "image_size": 16}
    env = {**os.environ, "ZICO_ESTIMATE_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "manage.py", "curve", "estimate", "digits-cnn", "--params-json",
                    '{"batch_size": 4, "image_size": 16}', "--device", ESTIMATE_DEVICE], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    settings.ZICO_ESTIMATE_CACHE_DIR = cache
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        fill(a.jobs)
        profiled = MemoryProfile.objects.select_related("job").first().job.params
        paths = {"profile": profiled, "miss": validate_params("digits-cnn", {"batch_size": 3}),
                 "estimate": validate_params("digits-cnn", estimated)}
        assert misfit("digits-cnn", paths["estimate"], None) is None  # judged on the estimate: it fits
        times: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(a.calls):  # interleaved, so the machine's load falls on every path alike
            for name, params in paths.items():
                t = time.perf_counter()
                misfit("digits-cnn", params, None)
                times[name].append(time.perf_counter() - t)
        base = statistics.median(times["profile"])
        print(f"submission check, median of {a.calls} calls each ({a.jobs} earlier jobs, "
              f"{Job.objects.count()} in the database):")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:9s} {med * 1000:7.2f} ms  ({med / base:.2f}x the profile path)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
