"""`zico curve show|import|estimate` and `zico submit --snapshot` against a real server, PostgreSQL and Redis: a job's
curve is shown as the API stores it; a real GPU run's snapshot attached to a job, or to a project's command before
any job runs it, makes the scheduler place the job without profiling it; a catalog workload's estimate is computed by
the scheduler's background child (the real `manage.py curve estimate`) while the command waits, then shown."""
import json
import time

import pytest

from placement.curves import curve_from_dict, resample, triangular_curve
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.estimates import BackgroundEstimates
from zico.scheduling.service import Scheduler
from zico_cli.curveview import SPARK_BINS, bin_maxima
from zico_contracts import keys
from zico_workloads.curves.snapshot import snapshot_curve

from .test_cli_submit import make_project


@pytest.fixture
def snapshot_file(tmp_path, torch_snapshot):
    path = tmp_path / "run.pickle"
    path.write_bytes(torch_snapshot)
    return path


def submitted(zico, project, *args):
    result = zico("submit", "--json", *args, project, "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_curve_show_prints_the_stored_curve_and_its_bins(zico, signed_in, tmp_path):
    job = Job.objects.get(pk=submitted(zico, make_project(tmp_path / "p"))["job"]["id"])
    missing = zico("curve", "show", job.pk)
    assert missing.exit_code == 4 and "this job has no memory profile yet (HTTP 404)" in missing.output
    stored = triangular_curve(1 << 30, 3 << 30, 0.25)
    profile = MemoryProfile.record(job, stored)
    result = zico("curve", "show", "--table", 4, job.pk)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert f"Job {job.pk}: memory curve {profile.pk}" in text and "source  estimate" in text
    assert f"({3 << 30:,} bytes)" in text and f"({1 << 30:,} bytes)" in text and "250.0 ms" in text
    [spark] = [line.split("  ", 1)[1] for line in text.splitlines() if line.strip().startswith("one iteration")]
    assert len(spark) == SPARK_BINS and set(spark) <= set("▁▂▃▄▅▆▇█") and "█" in spark
    rows = [line.split() for line in text.splitlines()[-4:]]
    assert [int(r[-1].replace(",", "")) for r in rows] == resample(curve_from_dict(profile.curve), 4).astype(int).tolist()
    as_json = json.loads(zico("curve", "show", "--json", job.pk).stdout)
    assert as_json["id"] == profile.pk and as_json["curve"] == profile.curve


def test_the_terminal_bins_are_the_placement_cores_for_a_real_snapshot(torch_snapshot):
    curve = curve_from_dict(snapshot_curve(torch_snapshot).to_dict())
    for n in (1, 7, SPARK_BINS, 500):
        assert bin_maxima(curve.to_dict()["points"], n) == resample(curve, n).tolist()


def test_curve_show_of_another_tenants_job_is_not_found(zico, signed_in, personas, tmp_path):
    from zico.jobs.code import store_archive
    from zico.jobs.submission import submit_job
    from tests.support.jobs import project
    import io

    archive, _ = store_archive(personas.other_tenant, io.BytesIO(project()), personas.outsider)
    theirs = submit_job(tenant=personas.other_tenant, owner=personas.outsider, code=archive, command=["x"])
    MemoryProfile.record(theirs, triangular_curve(1 << 30, 2 << 30, 0.1))
    result = zico("curve", "show", theirs.pk)
    assert result.exit_code == 4 and "HTTP 404" in result.output


def test_curve_import_attaches_a_snapshot_to_a_queued_job_which_is_then_not_profiled(zico, signed_in, tmp_path,
                                                                                     snapshot_file, torch_snapshot):
    job_id = submitted(zico, make_project(tmp_path / "p"))["job"]["id"]
    result = zico("curve", "import", job_id, snapshot_file)
    assert result.exit_code == 0, result.output
    peak = int(snapshot_curve(torch_snapshot).peak_bytes)
    assert f"Job {job_id} takes the snapshot's curve" in result.stdout
    job = Job.objects.get(pk=job_id)
    assert job.latest_profile().source == "torch-snapshot" and job.latest_profile().peak_bytes == peak
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert job.pk in res.ready and job.pk not in res.profiling and job.status == "ready"
    shown = json.loads(zico("curve", "show", "--json", job_id).stdout)
    assert shown["source"] == "torch-snapshot" and shown["curve"]["meta"]["file"] == "run.pickle"
    again = zico("curve", "import", job_id, snapshot_file)  # ready now: the curve it is placed with stays
    assert again.exit_code == 4 and f"job {job_id} is ready" in again.output and "HTTP 409" in again.output


def test_curve_import_of_a_bad_file_says_what_is_wrong_and_stores_nothing(zico, signed_in, tmp_path):
    job_id = submitted(zico, make_project(tmp_path / "p"))["job"]["id"]
    bad = tmp_path / "evil.pickle"
    bad.write_bytes(f"cos\nsystem\n(S'touch {tmp_path}/pwned'\ntR.".encode())
    result = zico("curve", "import", job_id, bad)
    assert result.exit_code == 4 and "snapshot: refused: the pickle asks to import os.system" in result.output
    assert "HTTP 400" in result.output and not (tmp_path / "pwned").exists() and not MemoryProfile.objects.exists()
    assert zico("curve", "import", job_id, tmp_path / "nope.pickle").exit_code == 2  # no such file: usage
    assert zico("curve", "import", job_id).exit_code == 2


def test_a_curve_imported_for_a_command_serves_the_jobs_submitted_later(zico, signed_in, tmp_path, snapshot_file,
                                                                        torch_snapshot):
    project = make_project(tmp_path / "p")
    result = zico("curve", "import", "--json", "--for", project, "--env", "SEED=1", snapshot_file, "--",
                  "python", "train.py")
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)
    assert stored["command"] == ["python", "train.py"] and stored["env"] == {"SEED": "1"}
    assert stored["peak_bytes"] == int(snapshot_curve(torch_snapshot).peak_bytes)
    same = submitted(zico, project, "--env", "SEED=1")["job"]
    other = submitted(zico, project)["job"]  # another env: another identity
    assert same["params"] == MemoryProfile.objects.get(pk=stored["id"]).identity
    res = Scheduler().run_round()
    assert res.ready == [same["id"]]
    assert Job.objects.get(pk=same["id"]).latest_profile().peak_bytes == stored["peak_bytes"]
    assert not Job.objects.get(pk=other["id"]).profiles.exists()


def test_submit_with_a_snapshot_is_placed_unprofiled_and_a_bad_one_submits_nothing(zico, signed_in, tmp_path,
                                                                                  snapshot_file):
    project = make_project(tmp_path / "p")
    result = zico("submit", "--snapshot", snapshot_file, project, "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    assert "placed without being profiled" in result.stdout
    job = Job.objects.get()
    assert Scheduler().run_round().ready == [job.pk]
    assert job.latest_profile().source == "torch-snapshot"
    small = zico("submit", "--snapshot", snapshot_file, "--budget", "1GiB", project, "--", "python", "train.py")
    assert small.exit_code == 4 and "exceeds --budget 1073741824: the job could never run" in small.output
    assert Job.objects.count() == 1
    bad = tmp_path / "empty.pickle"
    bad.write_bytes(b"\x80\x04]\x94.")  # a pickled empty list
    result = zico("submit", "--snapshot", bad, project, "--", "python", "train.py")
    assert result.exit_code == 4 and "expected a dict at the top, got list (HTTP 400)" in result.output
    assert Job.objects.count() == 1


def test_curve_estimate_waits_for_the_schedulers_background_estimate(zico, zico_process, signed_in, estimate_redis,
                                                                     settings):
    asked = zico("curve", "estimate", "digits-cnn", "-p", "batch_size=16", "--wait", 0)
    assert asked.exit_code == 0 and "not stored yet" in asked.stdout
    p = zico_process("curve", "estimate", "--json", "digits-cnn", "-p", "batch_size=16", "--wait", 600)
    estimates = BackgroundEstimates(time_limit_s=600)
    scheduler = Scheduler(estimates=estimates)
    deadline = time.monotonic() + 600
    try:
        scheduler.run_round()  # takes the request; its child starts
        while estimate_redis.hlen(keys.ESTIMATE_REQUESTS) and time.monotonic() < deadline:
            if estimates.running is not None:
                estimates.running[2].wait(timeout=deadline - time.monotonic())
            scheduler.run_round()
    finally:
        estimates.close()
    stdout, stderr = p.communicate(timeout=120)  # the command sees it at its next ask
    assert p.returncode == 0, stderr
    answer = json.loads(stdout)
    from zico.jobs import known

    stored = known.stored_estimate("digits-cnn", answer["params"])
    assert answer["status"] == "stored" and answer["curve"]["peak_bytes"] == int(stored.peak_bytes)
    text = zico("curve", "estimate", "digits-cnn", "-p", "batch_size=16").stdout  # stored: answered at once
    assert "digits-cnn on cuda:0, estimated: batch_size=16" in text and f"({int(stored.peak_bytes):,} bytes)" in text


def test_curve_estimate_names_bad_input(zico, signed_in, estimate_redis):
    unknown = zico("curve", "estimate", "nope")
    assert unknown.exit_code == 4 and "nope" in unknown.output and "HTTP 404" in unknown.output
    bad = zico("curve", "estimate", "digits-cnn", "-p", "batch_size=0")
    assert bad.exit_code == 4 and "params.batch_size" in bad.output and "HTTP 400" in bad.output
    assert zico("curve", "estimate", "digits-cnn", "-p", "batch_size").exit_code == 2
    late = zico("curve", "estimate", "digits-cnn", "--wait", 0.1)  # no scheduler here: still waiting
    assert late.exit_code == 4 and "no estimate of digits-cnn yet after 0.1 s" in late.output
