"""Checkpoints are written atomically, read back exactly, and refused when they belong to another job."""
import pytest
import torch

from workers.job import checkpoints


def test_a_checkpoint_round_trips_a_training_state(tmp_path):
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "iterations_done": 7}
    path = checkpoints.save(tmp_path, 5, 6, state, train_s=1.5)
    got = checkpoints.load(tmp_path, 5)
    assert path == tmp_path / "job-5" / "checkpoint.pt"
    assert got["iteration"] == 6 and got["train_s"] == 1.5
    assert torch.equal(got["state"]["model"]["w"], state["model"]["w"])
    assert not list(path.parent.glob("*.tmp"))  # no temporary left behind


def test_a_missing_checkpoint_reads_as_none(tmp_path):
    assert checkpoints.load(tmp_path, 99) is None


def test_a_corrupt_checkpoint_is_refused_with_its_path(tmp_path):
    path = checkpoints.checkpoint_path(tmp_path, 3)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoints.CheckpointError, match="unreadable"):
        checkpoints.load(tmp_path, 3)


def test_another_jobs_checkpoint_is_refused(tmp_path):
    checkpoints.save(tmp_path, 4, 0, {"x": 1})
    checkpoints.checkpoint_path(tmp_path, 4).rename(tmp_path / "stolen.pt")
    target = checkpoints.checkpoint_path(tmp_path, 8)
    target.parent.mkdir(parents=True)
    (tmp_path / "stolen.pt").rename(target)
    with pytest.raises(checkpoints.CheckpointError, match="does not belong to job 8"):
        checkpoints.load(tmp_path, 8)


def test_a_second_save_replaces_the_first_and_remove_cleans_up(tmp_path):
    checkpoints.save(tmp_path, 2, 1, {"i": 1})
    checkpoints.save(tmp_path, 2, 9, {"i": 9})
    assert checkpoints.load(tmp_path, 2)["iteration"] == 9
    checkpoints.remove(tmp_path, 2)
    assert checkpoints.load(tmp_path, 2) is None
    assert not (tmp_path / "job-2").exists()


def test_a_checkpoint_of_an_earlier_job_with_the_same_id_is_discarded(tmp_path):
    # A deployment restarted on an empty database reuses job ids while keeping the checkpoint directory.
    checkpoints.save(tmp_path, 7, 41, {"w": 1}, job_created_at="2026-01-01T00:00:00+00:00")
    assert checkpoints.load(tmp_path, 7, "2026-01-01T00:00:00+00:00")["iteration"] == 41  # the same job
    assert checkpoints.load(tmp_path, 7, "2026-11-29T12:00:00+00:00") is None  # another job 7
    assert not checkpoints.checkpoint_path(tmp_path, 7).exists()  # and the stale file is gone


def test_a_checkpoint_without_a_creation_time_still_resumes(tmp_path):
    checkpoints.save(tmp_path, 3, 5, {"w": 1})  # written by a sender that does not set the time
    assert checkpoints.load(tmp_path, 3, "2026-11-29T12:00:00+00:00")["iteration"] == 5
    checkpoints.save(tmp_path, 3, 6, {"w": 1}, job_created_at="2026-11-29T12:00:00+00:00")
    assert checkpoints.load(tmp_path, 3)["iteration"] == 6  # no time asked: no check
