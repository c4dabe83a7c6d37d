"""A job-written file the worker reads (workers.jobfiles.read_job_file): a FIFO, a symlink to a host file and an
oversized file are refused at once with a reason; a regular file is read."""
import os

import pytest

from workers.jobfiles import JobFileError, read_job_file


def test_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "trace.json")
    with pytest.raises(JobFileError, match="not a regular file"):
        read_job_file(tmp_path, "trace.json")


def test_symlink_to_host_file_is_refused(tmp_path):
    os.symlink("/etc/passwd", tmp_path / "trace.json")
    with pytest.raises(JobFileError, match="symlink"):
        read_job_file(tmp_path, "trace.json")


def test_oversized_file_is_refused(tmp_path):
    with open(tmp_path / "trace.json", "wb") as f:
        f.truncate(2000)
    with pytest.raises(JobFileError, match="over the bound of 1000"):
        read_job_file(tmp_path, "trace.json", max_bytes=1000)


def test_regular_file_is_read(tmp_path):
    (tmp_path / "trace.json").write_bytes(b"[]")
    assert read_job_file(tmp_path, "trace.json") == b"[]"


def test_profiled_curve_refuses_a_fifo_trace(tmp_path):
    """The worker's reader of the profile trace: a FIFO in its place is an unusable trace, not a hang."""
    from types import SimpleNamespace

    from workers.runner import profiled_curve
    from workers.job.entry import PROFILE_TRACE

    os.mkfifo(tmp_path / PROFILE_TRACE)
    with pytest.raises(ValueError, match="not a regular file"):
        profiled_curve(SimpleNamespace(scratch_dir=tmp_path), 1, 1, "cpu", {})
