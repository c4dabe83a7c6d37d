"""A device worker started the documented way (``python -m workers.bootstrap``) runs real training jobs.

Each test module talks to its own private Redis (restartable) through a Celery client app, and reads what
the worker sent to the web side from the Redis streams — the worker never touches the database.
"""
import json
import os
import time
import uuid
from pathlib import Path

import pytest
import redis
from celery import Celery

from servers import RedisServer, start_worker, stop_process
from zico_contracts import keys

HOST = f"wt{uuid.uuid4().hex[:6]}"
QUEUE = f"cpu.{HOST}"
DEV = f"cpu.{HOST}.0"


@pytest.fixture(scope="module")
def server():
    with RedisServer() as s:
        yield s


@pytest.fixture(scope="module")
def worker(server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("worker")
    env = {"REDIS_URL": server.url, "CELERY_BROKER_URL": server.url, "CELERY_RESULT_BACKEND": server.url,
           "ZICO_HOST": HOST, "ZICO_CHECKPOINT_DIR": str(tmp / "ckpt"), "ZICO_DATA_DIR": str(tmp / "data"),
           "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
    proc = start_worker(["--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING"], env,
                        tmp / "worker.log")
    yield proc, tmp
    stop_process(proc)


@pytest.fixture(scope="module")
def client(server):
    app = Celery("test-client", broker=server.url, backend=server.url)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
    return app


def control(server):
    r = redis.Redis(port=server.port)
    return [json.loads(f[b"data"]) for _, f in r.xrange(keys.CONTROL_STREAM)]


def samples(server):
    r = redis.Redis(port=server.port)
    return [json.loads(f[b"data"]) for _, f in r.xrange(keys.TELEMETRY_STREAM)]


def run(client, job_id, workload, params, placement=1, run_token=None):
    spec = {"workload": workload, "params": params, "placement": placement}
    if run_token is not None:
        spec["run_token"] = run_token
    return client.send_task("zico.device.run_job", args=[job_id, spec], queue=QUEUE)


def test_tasks_run_in_the_agents_process_and_no_pool_process_is_forked(worker, client):
    proc, _ = worker
    facts = client.send_task("zico.device.describe", queue=QUEUE).get(timeout=180)
    assert facts["pid"] == proc.pid == facts["runtime_pid"]
    assert facts["thread"] != "MainThread"  # a threads-pool thread of that process
    assert facts["cuda_initialized"] in (False, None)
    assert facts["pool"] == "agent" and facts["job_pids"] == {}
    assert _children(proc.pid) == []  # no forked pool processes; job processes exist only while jobs run


def _children(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == pid]


def _ppid(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def worker_up(server, timeout_s=60.0) -> list[dict]:
    """The worker's ``worker_up`` messages, waiting on the control stream (XREAD BLOCK) until there is one."""
    r = redis.Redis(port=server.port)
    last, deadline = "0-0", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for _, entries in r.xread({keys.CONTROL_STREAM: last}, block=1000) or []:
            last = entries[-1][0]
            if any(json.loads(f[b"data"])["msg"] == "worker_up" for _, f in entries):
                return [m for m in control(server) if m["msg"] == "worker_up"]
    return []


def test_it_registers_its_device_and_heartbeats(worker, server):
    r = redis.Redis(port=server.port)
    up = worker_up(server)
    assert up and up[-1]["device"] == DEV and up[-1]["total_bytes"] == 2 << 30 and up[-1]["slots"] == 2
    beat1 = r.get(keys.heartbeat_key(DEV))
    time.sleep(1.5)
    assert r.get(keys.heartbeat_key(DEV)) != beat1 and r.ttl(keys.heartbeat_key(DEV)) > 0
    # the bound of a job's disk, decided at start (Note [A job's disk] in workers/agent/diskwatch.py)
    disk = json.loads(r.get(keys.heartbeat_key(DEV)))["job_disk"]
    quota = os.geteuid() == 0 and os.path.exists("/dev/loop-control")
    assert disk["bound"] == ("quota" if quota else "watch") and 1 << 20 <= disk["bytes"] <= 64 << 30, disk


def test_two_real_jobs_share_the_device_and_report_memory_at_four_hertz_or_more(worker, client, server):
    a = run(client, 11, "digits-cnn", {"iterations": 1000})  # >= 2 s of training on a quiet core
    b = run(client, 12, "tiny-lm", {"iterations": 60})
    out_a, out_b = a.get(timeout=300), b.get(timeout=300)
    assert out_a["status"] == "succeeded" and out_b["status"] == "succeeded", (out_a, out_b)
    assert out_a["metrics"]["train_accuracy"] > 0.3 and out_a["metrics"]["peak_allocated_bytes"] > 0
    assert out_b["metrics"]["loss"] < 5.6  # below ln(256): the byte-level LM learned something
    got = samples(server)
    for job in (11, 12):
        ts = sorted(s["t"] for s in got if s["job"] == job and s["phase"] not in ("setup",))
        assert len(ts) >= 8
        gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
        assert gaps[len(gaps) // 2] <= 0.25  # median interval: published at >= 4 Hz
    both = [s for s in got if s["job"] is None and set(s["jobs"]) == {11, 12}]
    assert both, "the two jobs were never on the device at the same time"
    msgs = [m["msg"] for m in control(server) if m.get("job") in (11, 12)]
    assert msgs.count("job_started") == 2 and msgs.count("job_finished") == 2
    pids = {out_a["metrics"]["pid"], out_b["metrics"]["pid"]}  # each job ran in a process of its own
    assert len(pids) == 2 and worker[0].pid not in pids
    started = {m["job"]: m["pid"] for m in control(server) if m["msg"] == "job_started" and m["job"] in (11, 12)}
    assert set(started.values()) == pids


def test_a_job_alone_with_a_curve_records_no_delays(worker, client, server):
    from placement.curves import triangular_curve

    curve = triangular_curve(1 << 20, 8 << 20, iteration_s=0.05).to_dict()
    spec = {"workload": "digits-cnn", "params": {"iterations": 30}, "placement": 5, "curve": curve}
    out = client.send_task("zico.device.run_job", args=[15, spec], queue=QUEUE).get(timeout=300)
    assert out["status"] == "succeeded", out
    assert out["metrics"]["delays"] == 0 and out["metrics"]["delay_s"] == 0.0
    assert not [m for m in control(server) if m["msg"] == "job_delay" and m["job"] == 15]


def test_a_finished_run_delivered_again_is_not_run_twice(worker, client, server):
    again = run(client, 11, "digits-cnn", {"iterations": 150}).get(timeout=120)
    assert again["status"] == "succeeded"
    starts = [m for m in control(server) if m["msg"] == "job_started" and m["job"] == 11]
    assert len(starts) == 1


def test_a_done_record_of_an_old_deployment_does_not_stop_a_new_run(worker, client, server):
    # An earlier deployment (another database: same job and placement ids) left its done record behind.
    r = redis.Redis(port=server.port)
    old = {"job": 51, "placement": 1, "run_token": "old-deployment-token", "status": "succeeded", "metrics": {}}
    r.set(keys.done_key(51), json.dumps(old), ex=keys.DONE_TTL_S)
    keys.request_cancel(r, 51)  # that earlier run of job 51 was cancelled by its user ...
    ckpt = Path(worker[1]) / "ckpt" / "job-51" / "checkpoint.pt"  # ... and left a checkpoint (not this job's)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"a checkpoint of the old deployment's job 51")
    out = run(client, 51, "digits-cnn", {"iterations": 3}, run_token="new-deployment-token").get(timeout=120)
    assert out["status"] == "succeeded" and out["run_token"] == "new-deployment-token"
    assert out["metrics"]["iterations_done"] == 3
    starts = [m for m in control(server) if m["msg"] == "job_started" and m["job"] == 51]
    assert len(starts) == 1
    assert json.loads(r.get(keys.done_key(51)))["run_token"] == "new-deployment-token"
    assert not r.exists(keys.cancel_key(51)) and not ckpt.exists()
    # the same run delivered again (same placement, same token) is still not run twice
    again = run(client, 51, "digits-cnn", {"iterations": 3}, run_token="new-deployment-token").get(timeout=120)
    assert again["status"] == "succeeded"
    assert len([m for m in control(server) if m["msg"] == "job_started" and m["job"] == 51]) == 1


def test_a_cancel_request_stops_the_job_within_an_iteration(worker, client, server):
    res = run(client, 21, "tiny-lm", {"iterations": 100000})
    r = redis.Redis(port=server.port)
    deadline = time.monotonic() + 120
    while not any(s["job"] == 21 and s["iteration"] >= 2 for s in samples(server)[-20:]):
        assert time.monotonic() < deadline, "job 21 never started iterating"
        time.sleep(0.2)
    keys.request_cancel(r, 21)
    t0 = time.monotonic()
    out = res.get(timeout=60)
    assert out["status"] == "cancelled"
    assert time.monotonic() - t0 < 5.0
    assert out["metrics"]["iterations_done"] < 100000


def test_a_training_error_ends_the_job_failed_with_its_message(worker, client):
    out = run(client, 31, "tiny-lm", {"iterations": 3, "corpus": "missing/nothing.txt"}).get(timeout=120)
    assert out["status"] == "failed"
    assert "corpus" in out["reason"]


def test_a_malformed_spec_is_refused_and_reported(worker, client, server):
    res = client.send_task("zico.device.run_job", args=[41, {"params": {}}], queue=QUEUE)
    with pytest.raises(Exception, match="workload"):
        res.get(timeout=60)
    fin = [m for m in control(server) if m["msg"] == "job_finished" and m["job"] == 41]
    assert fin and fin[0]["status"] == "failed" and "workload" in fin[0]["reason"]


def test_a_catalog_job_runs_as_the_catalog_project_in_a_sandboxed_script_process(worker, client, server):
    """Note [Catalog jobs run as scripts] in workers.runner: the job's own process, found from ``describe`` while
    it runs, is ``workers.job.entry`` in a PID namespace of its own, under the job's uid, its current directory
    the built-in project; the job ends with the project's figures and the agent's memory figures."""
    from workers.agent.settings import AgentSettings

    res = run(client, 61, "digits-cnn", {"iterations": 100000})
    deadline = time.monotonic() + 120
    while not any(s["job"] == 61 and s["iteration"] >= 1 for s in samples(server)[-20:]):
        assert time.monotonic() < deadline, "job 61 never started iterating"
        time.sleep(0.2)
    started = [m for m in control(server) if m["msg"] == "job_started" and m["job"] == 61]
    job_pid = started[0]["pid"]
    launched = client.send_task("zico.device.describe", queue=QUEUE).get(timeout=60)["job_pids"]["61"]
    assert _ppid(str(launched)) == worker[0].pid and launched != job_pid  # the worker's child: the outer bwrap
    assert Path(f"/proc/{launched}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
    argv = Path(f"/proc/{job_pid}/cmdline").read_bytes().split(b"\0")
    assert argv[1:5] == [b"-m", b"workers.job.entry", b"--spec-file", b"/zico/spec.json"]
    status = dict(line.split(":", 1) for line in Path(f"/proc/{job_pid}/status").read_text().splitlines())
    assert len(status["NSpid"].split()) == 2  # a pid of its own namespace: the sandbox's
    assert int(status["Uid"].split()[0]) == AgentSettings().job_uid(61)
    assert os.readlink(f"/proc/{job_pid}/cwd") == "/job/code"
    code_files = os.listdir(f"/proc/{job_pid}/root/job/code")
    assert "train.py" in code_files
    keys.request_cancel(redis.Redis(port=server.port), 61)
    out = res.get(timeout=60)
    assert out["status"] == "cancelled", out
    m = out["metrics"]
    assert m["pid"] == job_pid and m["peak_allocated_bytes"] > 0 and "loss" in m and m["resumed_from"] == 0
    assert 0 < m["iterations_done"] == m["iterations_this_run"] < 100000
    progress = [p for p in control(server) if p["msg"] == "job_progress" and p["job"] == 61]
    assert progress and progress[-1]["iterations"] == 100000 and "loss" in progress[-1]["values"]
    assert "iteration" not in progress[-1]["values"]
