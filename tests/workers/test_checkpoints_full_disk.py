"""A checkpoint save on a full file system (a real 1 MiB tmpfs, filled up) fails with a message naming
the path and the free bytes, leaves no temporary or partial file, keeps the previous checkpoint, and a
training loop saving through checkpoints.SaveTally goes on (Note [Checkpoints that cannot half-write])."""
import errno
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import redis
import torch

from workers.job import checkpoints
from zico_contracts import joblog
from zico_workloads.training import create_training_job


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs mounted for this test (needs root and mount permission; skipped otherwise)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {got.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(fs: Path, leave_bytes: int = 0) -> Path:
    """Write a filler file until only about ``leave_bytes`` are free; returns it."""
    filler = fs / f"filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb") as f:
        try:
            while os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize > leave_bytes:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "checkpoint.pt")


def test_a_save_on_a_full_disk_names_path_and_free_space_and_keeps_the_previous_checkpoint(tiny_fs):
    first = checkpoints.save(tiny_fs, 1, 3, {"w": torch.arange(8.0)}, train_s=1.0)
    before = first.read_bytes()
    fill(tiny_fs, leave_bytes=8192)
    with pytest.raises(checkpoints.CheckpointSaveError) as caught:
        checkpoints.save(tiny_fs, 1, 4, {"w": torch.zeros(64 << 10)})  # 256 KiB of state: does not fit
    err = caught.value
    assert err.errno == errno.ENOSPC and err.path == first
    assert str(first) in str(err) and "No space left on device" in str(err)
    assert err.free_bytes is not None and f"{err.free_bytes} bytes" in str(err) and err.free_bytes < 8192
    assert leftovers(first.parent) == []  # no temporary or partial file
    assert first.read_bytes() == before
    assert checkpoints.load(tiny_fs, 1)["iteration"] == 3


def test_a_training_loop_goes_on_past_failed_saves_and_reports_them(tiny_fs):
    job = create_training_job("digits-cnn", {"iterations": 12})
    saves = checkpoints.SaveTally()
    assert saves.save(tiny_fs, 2, 0, job.state_dict()) is not None
    filler = fill(tiny_fs, leave_bytes=0)
    for i in range(0, 6):
        job.run_iteration(i)
        assert saves.save(tiny_fs, 2, i, job.state_dict()) is None
    assert saves.failures == 6 and job.iterations_done == 6
    got = saves.metrics()
    assert got["checkpoint_failures"] == 6 and str(checkpoints.checkpoint_path(tiny_fs, 2)) in got["checkpoint_last_failure"]
    assert "free space there" in got["checkpoint_last_failure"]
    assert checkpoints.load(tiny_fs, 2)["iteration"] == 0  # the last good one
    filler.unlink()  # space again: the next save works and the loop never stopped
    for i in range(6, 12):
        job.run_iteration(i)
    assert saves.save(tiny_fs, 2, 11, job.state_dict()) is not None
    assert checkpoints.load(tiny_fs, 2)["iteration"] == 11 and leftovers(tiny_fs / "job-2") == []
    assert saves.failures == 6


def test_a_read_only_directory_is_a_save_error_too(tmp_path):
    root = tmp_path / "ro"
    checkpoints.save(root, 3, 0, {"w": 1})
    if os.geteuid() == 0:
        pytest.skip("root writes through file modes")
    os.chmod(root / "job-3", 0o500)
    try:
        with pytest.raises(checkpoints.CheckpointSaveError, match="Permission denied"):
            checkpoints.save(root, 3, 1, {"w": 2})
    finally:
        os.chmod(root / "job-3", 0o700)


def test_a_state_that_cannot_be_pickled_is_not_mistaken_for_a_disk_error(tmp_path):
    with pytest.raises(Exception) as caught:
        checkpoints.save(tmp_path, 4, 0, {"f": lambda: None})
    assert not isinstance(caught.value, checkpoints.CheckpointSaveError)
    assert leftovers(tmp_path / "job-4") == []


@pytest.mark.slow
def test_a_device_worker_finishes_a_job_whose_checkpoints_cannot_be_written(tiny_fs, tmp_path):
    """The real runner in a worker started the documented way: every save hits the full disk, the job still
    succeeds, and its metrics carry the failures with the message."""
    from celery import Celery

    from servers import RedisServer, start_worker, stop_process

    host = f"ck{uuid.uuid4().hex[:6]}"
    fill(tiny_fs, leave_bytes=0)
    with RedisServer() as server:
        env = {"REDIS_URL": server.url, "CELERY_BROKER_URL": server.url, "CELERY_RESULT_BACKEND": server.url,
               "ZICO_HOST": host, "ZICO_CHECKPOINT_DIR": str(tiny_fs / "ckpt"), "ZICO_DATA_DIR": str(tmp_path / "data"),
               "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
        proc = start_worker(["--kind", "cpu", "--capacity", "2GiB", "--slots", "1", "--checkpoint-every", "0.01",
                             "--loglevel", "WARNING"], env, tmp_path / "worker.log")
        try:
            app = Celery("test-client", broker=server.url, backend=server.url)
            app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
            out = app.send_task("zico.device.run_job", args=[31, {"workload": "digits-cnn", "params": {"iterations": 40},
                                                                  "placement": 1}],
                                queue=f"cpu.{host}").get(timeout=300)
            stream = redis.Redis(port=server.port).xrange(joblog.log_stream_key(31))
            lines = [joblog.parse(i, f)["line"] for i, f in stream]
        finally:
            stop_process(proc)
    assert out["status"] == "succeeded", out
    m = out["metrics"]
    assert m["iterations_done"] == 40 and m["checkpoint_failures"] >= 1
    assert str(tiny_fs / "ckpt" / "job-31" / "checkpoint.pt") in m["checkpoint_last_failure"]
    assert "No space left on device" in m["checkpoint_last_failure"]
    assert any("not saved" in line for line in lines)  # the warning in the job's log: the project's stderr
    assert [p.name for p in (tiny_fs / "ckpt" / "job-31").iterdir()] == []  # nothing half-written
