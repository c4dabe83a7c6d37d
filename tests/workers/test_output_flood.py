"""A job's output is bounded at the source (Note [A job's output is bounded] in workers.usercode): a real
sandboxed script prints 20 MiB of bare carriage returns and then 20 MB of text as fast as it can; its lines go
through the device agent and the worker's LogRelay into the real Redis log stream, as on a device worker. The
job succeeds, the worker process's resident memory stays within a bound, and the log says lines were dropped."""
import os
import threading
from pathlib import Path

import pytest
import redis
from django.conf import settings

from workers.agent import AgentSettings, DeviceAgent, JobRun
from workers.usercode import PENDING_MAX_LINES, LogRelay
from zico_contracts import joblog

SCRIPTS = Path(__file__).resolve().parent / "user_scripts"
MiB = 1 << 20
RSS_BOUND = 32 * MiB  # over a quiet job's run: LogRelay holds at most PENDING_MAX_LINES x LINE_MAX_BYTES (8 MiB)
pytestmark = [pytest.mark.services,
              pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")]


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def run_sampled(agent, job_id, argv, tmp_path, on_output):
    """``agent.run`` of the script, and the peak VmRSS (bytes) of this process (the worker's part) meanwhile."""
    spec = {"kind": "script", "code_dir": str(SCRIPTS), "argv": argv, "device": "cpu",
            "output_dir": str(tmp_path / f"out-{job_id}"), "scratch_dir": str(tmp_path / f"scratch-{job_id}")}
    peak, done = [rss_bytes()], threading.Event()

    def sample():
        while not done.wait(0.02):
            peak[0] = max(peak[0], rss_bytes())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        return agent.run(JobRun(job_id, spec, on_output=on_output)), peak[0]
    finally:
        done.set()
        sampler.join()


def test_a_job_flooding_its_output_cannot_grow_the_worker(tmp_path):
    r = redis.Redis.from_url(settings.REDIS_URL)
    job_id = 900_001
    r.delete(joblog.log_stream_key(job_id))
    agent = DeviceAgent("cpu", 1 << 30, 1 << 30, None, AgentSettings(hang_timeout_s=120, startup_timeout_s=120))
    relay = LogRelay(r, job_id)
    try:
        quiet, baseline = run_sampled(agent, job_id - 1, ["python", "floods_output.py", "--quiet"], tmp_path,
                                      lambda stream, line: None)  # what running any job costs the worker
        notes = []  # the agent's own lines about the job's output (stream "system")

        def on_output(stream, line):
            if stream == "system":
                notes.append(line)
            relay.line(stream, line)

        out, peak = run_sampled(agent, job_id, ["python", "floods_output.py"], tmp_path, on_output)
        relay.close()
    finally:
        agent.close()
    texts = [f[b"line"].decode() for _, f in r.xrange(joblog.log_stream_key(job_id))]
    r.delete(joblog.log_stream_key(job_id))
    growth = peak - baseline
    print({"rss_baseline_mib": baseline / MiB, "rss_growth_mib": growth / MiB, "dropped": relay.overflowed_total,
           "stored_lines": len(texts)})
    assert quiet["status"] == "succeeded" and out["status"] == "succeeded", (quiet, out)
    assert growth < RSS_BOUND, growth / MiB
    assert relay.overflowed_total > 0
    assert any(f"output lines dropped: the job printed more than {PENDING_MAX_LINES} lines" in t for t in texts)
    assert any("flood done" in t for t in texts[-5:])
    # Note [A job's output rate]: past the rate, lines are counted and dropped before they are cut
    assert any("lines of stdout dropped: the job printed faster than" in t for t in notes), (notes, texts[-5:])


def test_the_line_rate_admits_bursts_then_the_rate():
    from workers.agent.output import LineCutter, LineRate

    now = [0.0]
    rate = LineRate(100, burst=250, clock=lambda: now[0])
    assert rate.admit(200) == 200 and rate.admit(100) == 50 and rate.empty()
    now[0] += 0.5  # 50 lines' worth
    assert not rate.empty() and rate.admit(80) == 50
    now[0] += 100  # never more than the burst
    assert rate.admit(1000) == 250
    with pytest.raises(ValueError):
        LineRate(0)
    cutter = LineCutter(16)
    cutter.feed(b"half a li")
    cutter.discard()  # dropped with the rest: the next line starts clean
    assert cutter.feed(b"ne\nnext\n") == ["ne", "next"]


def test_a_stream_that_ends_over_the_rate_keeps_its_last_lines_whatever_chunk_they_came_in():
    # The containment suite's flood once lost "flood done": its last chunk was admitted in part, the note on the
    # earlier drops went out and the chunk's own dropped lines (the last words among them) were forgotten.
    from workers.agent.output import OUTPUT_TAIL_LINES, OutputDrain

    now = [0.0]
    drain = OutputDrain("stdout", 4096, 100, clock=lambda: now[0])  # a burst of 1000 lines
    out = drain.feed(b"x\n" * 1000)
    assert out == [("stdout", "x")] * 1000
    assert drain.feed(b"y\n" * 500) == []  # past the rate: counted uncut
    now[0] += 0.05  # five lines' worth: the last chunk is admitted in part
    out = drain.feed(b"z\n" * 30 + b"flood done\n")
    assert out[0][0] == "system" and "about 500 lines of stdout dropped" in out[0][1]
    assert out[1:] == [("stdout", "z")] * 5
    out = drain.close()
    assert out[0] == ("system", "about 26 lines of stdout dropped: the job printed faster than 100 lines a second "
                                f"(ZICO_JOB_OUTPUT_LINES_PER_S); its last {OUTPUT_TAIL_LINES} follow")
    assert out[-1] == ("stdout", "flood done") and len(out) == 1 + OUTPUT_TAIL_LINES


def test_a_stream_dropped_uncut_to_its_end_keeps_its_last_whole_lines():
    from workers.agent.output import OutputDrain

    drain = OutputDrain("stdout", 4096, 100, clock=lambda: 0.0)
    drain.feed(b"a\n" * 1000)
    assert drain.feed(b"b" * 100_000 + b"\nlast words\n") == []
    out = drain.close()
    assert out[0][0] == "system" and "about 2 lines" in out[0][1] and out[-1] == ("stdout", "last words")
    seen = []
    stderr = OutputDrain("stderr", 4096, 100, on_cut=seen.extend, clock=lambda: 0.0)
    stderr.feed(b"e\n" * 1500)
    assert len(seen) == 1500  # stderr is cut in full (a failed job's reason) though only the rate is handed on
