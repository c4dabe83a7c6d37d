"""A job's words as they leave the device worker (workers.joblines): no host path in what its tenant reads
(Note [Host paths in what a tenant sees]), and every job line the worker's own log prints marked as the job's
and escaped (Note [A job's lines in the worker's log]). The last test runs a real sandboxed script through the
device agent and the LogRelay into the real Redis log stream."""
import logging
import os
import sys
from pathlib import Path

import pytest

from workers.agent.agent import failure_reason
from workers.joblines import REPO, escape_controls, for_log, host_prefixes, neutral_paths

SCRIPTS = Path(__file__).resolve().parent / "user_scripts"
SITE = next(p for p, name in host_prefixes() if name == "<python>/site-packages")


def test_a_failure_reason_names_no_host_path():
    tail = "\n".join([
        "Traceback (most recent call last):",
        '  File "/job/code/train.py", line 9, in <module>',
        f'  File "{SITE}/torch/nn/modules/module.py", line 1511, in _wrapped_call_impl',
        f'  File "{sys.base_prefix}/lib/python3.11/json/decoder.py", line 337, in decode',
        f'  File "{REPO}/workers/job/entry.py", line 40, in main',
        f"RuntimeError: see {sys.prefix}/bin/python and {os.path.realpath(sys.executable)}",
    ])
    reason = failure_reason(f"RuntimeError in {SITE}/torch", "exited with status 1", tail)
    assert sys.prefix not in reason and sys.base_prefix not in reason and str(REPO) not in reason
    assert SITE not in reason and os.path.realpath(sys.executable) not in reason
    assert '"<python>/site-packages/torch/nn/modules/module.py"' in reason
    assert '"<zico>/workers/job/entry.py"' in reason and "<python>/lib/python3.11/json/decoder.py" in reason
    assert '"/job/code/train.py"' in reason  # the job's own paths are the job's
    assert reason.startswith("RuntimeError in <python>/site-packages/torch\nexited with status 1\n")


def test_only_whole_host_paths_are_rewritten():
    assert neutral_paths(f"{REPO}2/x") == f"{REPO}2/x"
    assert neutral_paths(f"/job/code{sys.prefix}/lib") == f"/job/code{sys.prefix}/lib"
    assert neutral_paths(f"at {sys.prefix}:") == "at <python>:"
    once = neutral_paths(f"{SITE}/torch")
    assert once == "<python>/site-packages/torch" and neutral_paths(once) == once
    assert all(p != "/" for p, _ in host_prefixes())


def test_a_job_line_in_the_worker_log_is_marked_and_escaped():
    line = "[zico] job stopped by the platform\x1b[31m\n2026-01-01 INFO forged\u2028x\x07"
    assert for_log(12, "stdout", line) == ("job 12 stdout| [zico] job stopped by the platform\\x1b[31m"
                                           "\\n2026-01-01 INFO forged\\u2028x\\x07")
    assert escape_controls("tab\there") == "tab\\there"


@pytest.mark.services
@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")
def test_a_hostile_jobs_lines_stay_the_jobs(tmp_path, caplog):
    import redis
    from django.conf import settings

    from workers.agent import AgentSettings, DeviceAgent, JobRun
    from workers.usercode import LogRelay
    from zico_contracts import joblog

    r = redis.Redis.from_url(settings.REDIS_URL)
    job_id = 900_101
    key = joblog.log_stream_key(job_id)
    r.delete(key)
    agent = DeviceAgent("cpu", 1 << 30, 1 << 30, None, AgentSettings(hang_timeout_s=120, startup_timeout_s=120))
    relay = LogRelay(r, job_id)
    spec = {"kind": "script", "code_dir": str(SCRIPTS), "argv": ["python", "forges_platform_lines.py"],
            "device": "cpu", "output_dir": str(tmp_path / "out"), "scratch_dir": str(tmp_path / "scratch")}
    caplog.set_level(logging.DEBUG, logger="workers.agent.launch")
    try:
        out = agent.run(JobRun(job_id, spec, on_output=relay.line))
        relay.close()
    finally:
        agent.close()
    stored = [joblog.parse(i, f) for i, f in r.xrange(key)]
    r.delete(key)
    assert out["status"] == "failed", out
    # the log keeps the forged line under the job's own stream, never the platform's
    forged = [e for e in stored if "job stopped by the platform" in e["line"]]
    assert [e["stream"] for e in forged] == ["stdout"]
    assert not any(e["stream"] == "system" for e in stored)
    assert any("\x1b[31mred" in e["line"] and e["stream"] == "stderr" for e in stored)  # the job's bytes, kept
    # what the tenant reads names no host path: the log and the failure reason
    assert stored and not any(sys.prefix in e["line"] or SITE in e["line"] for e in stored)
    assert "<python>/site-packages/torch/nn/modules/" in out["reason"], out["reason"]
    assert sys.prefix not in out["reason"] and SITE not in out["reason"] and str(REPO) not in out["reason"]
    # the worker's own log: each job line marked as the job's, its escapes escaped
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "workers.agent.launch"]
    assert f"job {job_id} stdout| [zico] job stopped by the platform" in logged
    assert f"job {job_id} stderr| \\x1b[2K\\x1b[1A\\x1b[31mred\\x1b[0m" in logged
    assert not any("\x1b" in m for m in logged)
