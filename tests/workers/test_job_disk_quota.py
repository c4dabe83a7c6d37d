"""A job's disk bounded by the kernel (Note [A job's disk] in workers.agent.diskwatch; workers.jobdisk): its run
directory a loop-mounted file system of its own, a real sandboxed script writing past it, a worker's start after a
crash, and hosts where the quota cannot be made (not root; a root without the privilege, in a user namespace)."""
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.workers.test_user_scripts import MiB, Job, run_alone
from workers import usercode
from workers.agent import AgentSettings
from workers.agent.settings import DISK_BYTES_MAX, DISK_FREE_SHARE
from workers.jobdisk import QUOTA, WATCH, JobDisks, mounts_under

REPO = Path(__file__).resolve().parents[2]
can_mount = os.geteuid() == 0 and os.path.exists("/dev/loop-control")
quota_only = pytest.mark.skipif(not can_mount, reason="a disk quota per job needs root and loop devices")


@pytest.mark.slow
@quota_only
@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")
def test_a_script_writing_past_its_disk_limit_gets_enospc_from_the_kernel_and_is_stopped(tmp_path):
    limit = 64 * MiB
    var = tmp_path / "var"
    disks = JobDisks.for_worker(var, "cpu.test.0", limit)
    assert disks.bound == QUOTA and disks.describe() == {"bound": "quota", "bytes": limit}, disks.why
    dirs = usercode.run_dirs(Path(__file__).parent / "user_scripts", 6, var, disks)
    run_dir = dirs.output_dir.parent
    assert [p for p, _ in mounts_under(var)] == [str(run_dir)]
    assert sorted(os.listdir(run_dir)) == ["output", "scratch"]  # no lost+found
    image = disks.images_dir / "6.img"
    held, done = [], threading.Event()

    def sample():  # what the host's disk holds for the job: its image's allocated blocks
        while not done.wait(0.02):
            held.append(os.stat(image).st_blocks * 512)

    sampler = threading.Thread(target=sample)
    sampler.start()
    job = Job(tmp_path, 6, ["python", "fallocates.py"], output_dir=str(dirs.output_dir),
              scratch_dir=str(dirs.scratch_dir))
    try:
        out = run_alone(job, disk_bytes=limit)
    finally:
        done.set()
        sampler.join()
    held.append(os.stat(image).st_blocks * 512)
    try:
        assert "fallocate: ENOSPC" in job.stdout(), job.lines  # refused at once, not 8 GiB later
        writes = [line for line in job.stdout() if line.startswith("write: ")]
        if writes:  # the watch may stop it before its writes reach the end of its file system
            assert writes[0].startswith("write: ENOSPC after "), writes
            assert int(writes[0].split()[3]) <= limit // MiB + 6, writes
        assert "not stopped" not in job.stdout()
        assert max(held) <= limit + 8 * MiB, (max(held), len(held))
        assert out["status"] == "failed", out
        assert out["reason"].startswith("wrote more than 64.00 MiB to its output and scratch directories (/tmp "
                                        "included), over the disk limit of a job (ZICO_JOB_DISK_BYTES)"), out
    finally:
        usercode.cleanup(dirs, disks)
    assert mounts_under(var) == [] and not run_dir.exists() and not image.exists()


@quota_only
def test_a_worker_start_unmounts_what_its_crashed_predecessor_left_and_nothing_of_another_device(tmp_path):
    var = tmp_path / "var"
    mine, other = JobDisks.for_worker(var, "cpu.a.0", 4 * MiB), JobDisks.for_worker(var, "gpu.a.1", 4 * MiB)
    mine.make(var / "jobs" / "1")
    other.make(var / "jobs" / "2")
    (var / "jobs" / "1" / "left").write_bytes(b"x" * 4096)
    # the worker of cpu.a.0 died here: its mount stays until the next worker of the device starts
    try:
        again = JobDisks.for_worker(var, "cpu.a.0", 4 * MiB)
        assert again.bound == QUOTA
        assert [p for p, _ in mounts_under(var)] == [str(var / "jobs" / "2")]
        assert not (var / "jobs" / "1").exists() and list(mine.images_dir.iterdir()) == []
    finally:
        other.remove(var / "jobs" / "2")
    assert mounts_under(var) == []


def _policy_as(prefix: list[str], var: Path) -> dict:
    code = ("import json, sys; from workers.jobdisk import JobDisks; "
            "d = JobDisks.for_worker(sys.argv[1], 'cpu.x.0', 1 << 20); print(json.dumps(d.describe()))")
    done = subprocess.run([*prefix, sys.executable, "-c", code, str(var)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="the test drops root to make a worker that is not root")
def test_a_worker_that_is_not_root_falls_back_to_the_watch_and_says_why():
    with tempfile.TemporaryDirectory(prefix="zico-var-") as var:  # pytest's own are root's alone (0700)
        os.chmod(var, 0o777)
        got = _policy_as(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], Path(var))
    assert got == {"bound": WATCH, "bytes": 1 << 20,
                   "why": "the worker is not root, so it cannot mount a file system per job"}, got


@pytest.mark.skipif(subprocess.run(["unshare", "--user", "--map-root-user", "true"]).returncode != 0,
                    reason="user namespaces are not available")
def test_a_root_that_cannot_mount_falls_back_to_the_watch_after_its_probe(tmp_path):
    # root in a user namespace of its own: uid 0, loop devices present, but mount (and the loop device) refused
    got = _policy_as(["unshare", "--user", "--map-root-user"], tmp_path / "var")
    assert got["bound"] == WATCH and got["why"].startswith("a probe file system could not be made: "), got
    assert mounts_under(tmp_path) == [] and list((tmp_path / "var" / "jobdisks" / "cpu.x.0").iterdir()) == []


def test_the_default_limit_fits_the_hosts_free_space_and_an_explicit_one_is_kept(monkeypatch):
    monkeypatch.delenv("ZICO_JOB_DISK_BYTES", raising=False)
    unset = AgentSettings.from_env()
    assert unset.disk_bytes is None and unset.job_disk_bytes == DISK_BYTES_MAX
    fitted, why = unset.fit_disk(40 << 30, 2)  # half of 40 GiB over 2 slots
    assert fitted.disk_bytes == 10 << 30 and "unset" in why and "2 slots" in why, why
    assert unset.fit_disk(1 << 40, 1)[0].disk_bytes == DISK_BYTES_MAX  # never more than 64 GiB
    assert unset.fit_disk(0, 4)[0].disk_bytes == 1 << 20  # a full disk: the least the knob accepts
    monkeypatch.setenv("ZICO_JOB_DISK_BYTES", str(200 << 30))
    explicit = AgentSettings.from_env()
    assert explicit.fit_disk(40 << 30, 2) == (explicit, "ZICO_JOB_DISK_BYTES") and explicit.disk_bytes == 200 << 30


def test_a_worker_start_fits_the_limit_to_its_jobs_directory_and_decides_the_bound_once(tmp_path, monkeypatch):
    import shutil

    from workers.bootstrap import job_disks
    from workers.device import WorkerConfig

    monkeypatch.delenv("ZICO_JOB_DISK_BYTES", raising=False)
    config = WorkerConfig(kind="cpu", host="h", index=0, slots=3, capacity_bytes=1 << 30, budget_bytes=None,
                          redis_url="redis://unused", checkpoint_dir=tmp_path / "ckpt", data_dir=tmp_path / "data",
                          var_dir=tmp_path / "var")
    free = shutil.disk_usage(tmp_path).free
    settings, disks = job_disks(config, AgentSettings.from_env())
    expected = min(DISK_BYTES_MAX, int(free * DISK_FREE_SHARE) // 3)
    assert abs(settings.disk_bytes - expected) <= 256 * MiB and disks.disk_bytes == settings.disk_bytes
    assert disks.bound == (QUOTA if can_mount else WATCH) and disks.jobs_dir == tmp_path / "var" / "jobs"
