"""A job-written file the worker reads (workers.jobfiles.read_job_file): a FIFO, a symlink to a host file and an
oversized file are refused at once with a reason; a regular file is read. The profile trace in it
(workers.profiletrace) is refused when it claims more than the agent measured or holds what no trace holds."""
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

    from workers.profiletrace import profiled_curve
    from workers.job.entry import PROFILE_TRACE

    os.mkfifo(tmp_path / PROFILE_TRACE)
    with pytest.raises(ValueError, match="not a regular file"):
        profiled_curve(SimpleNamespace(scratch_dir=tmp_path), 1, 1, "cpu", {})


def _rows(iterations=3, peak=1000, step_s=0.1):
    rows = []
    for i in range(iterations):
        t = i * step_s
        rows += [["iteration_start", t, 0, 0, i], ["alloc", t + step_s / 3, peak, peak, i],
                 ["free", t + step_s / 2, 0, -peak, i], ["iteration_end", t + step_s * 0.9, 0, 0, i]]
    return rows


@pytest.mark.parametrize("rows, measured, why", [
    (_rows(peak=5000), {"held_peak_bytes": 4096}, "5000 bytes allocated, more than the 4096 bytes"),
    (_rows(iterations=9), {"iterations": 3}, "marks 9 iterations; the agent let 3 start"),
    (_rows(step_s=100.0), {"profile_s": 10.0}, r"spans 290.0 s; the profile ran 10.0 s"),
    ([["alloc", 0.0, 10, 10, 0, "extra"]], {}, "row 0 is not"),
    ([["mmap", 0.0, 10, 10, 0]], {}, "not a kind of the allocator's trace"),
    ([["alloc", -1.0, 10, 10, 0]], {}, "timestamp -1.0"),
    ([["alloc", 0.0, 10.5, 10, 0]], {}, "must be integers"),
    ({"rows": []}, {}, "is a dict, not a list"),
])
def test_a_trace_that_claims_more_than_the_agent_measured_is_refused(rows, measured, why):
    """Note [A profile is what the agent measured] in workers.agent.agent."""
    from workers.profiletrace import checked_trace_rows

    with pytest.raises(ValueError, match=why):
        checked_trace_rows(rows, **measured)


def test_a_trace_within_the_agents_measures_is_kept():
    from workers.profiletrace import checked_trace_rows

    rows = _rows()
    assert checked_trace_rows(rows, held_peak_bytes=1000, iterations=3, profile_s=0.3) is rows


def test_profiled_curve_refuses_nan_in_a_trace(tmp_path):
    from types import SimpleNamespace

    from workers.profiletrace import profiled_curve
    from workers.job.entry import PROFILE_TRACE

    (tmp_path / PROFILE_TRACE).write_text('[["alloc", NaN, 10, 10, 0]]')
    with pytest.raises(ValueError, match="NaN is not a number a trace may hold"):
        profiled_curve(SimpleNamespace(scratch_dir=tmp_path), 1, 1, "cpu", {})
