"""The phases of scripts/compose-check.sh after the images exist: the real docker-compose.yml (plus
deploy/compose-check/override.yml) brought up, used from this host as a user would, restarted, and joined by a
second worker host. Run by the shell script (which owns dockerd, the stand-in images and the clean-up) with the
project's Python; it prints each phase's time and raises CheckFailed (exit 1) naming what was not as expected.

Usage: python deploy/compose-check/check.py ENV_FILE WORK_DIR
  ENV_FILE  the compose env file the script wrote (SECRET_KEY, POSTGRES_PASSWORD, ZICO_HTTP_PORT=127.0.0.1:PORT)
  WORK_DIR  a scratch folder (the zico command's config, the probe project's copy)
Projects: zicocheck (the first host) and zicocheck-host2 (the second worker host).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROJECT, PROJECT2 = "zicocheck", "zicocheck-host2"
FILES = ["-f", str(REPO / "docker-compose.yml"), "-f", str(HERE / "override.yml")]
HOST1, HOST2 = "checkhost1", "checkhost2"
ENDED = ("succeeded", "failed", "cancelled")
CATALOG = {"workload": "digits-cnn", "params": {"batch_size": 64, "image_size": 16, "iterations": 400}}


class CheckFailed(RuntimeError):
    """A phase saw something other than what the deployment must do."""


def log(msg: str) -> None:
    print(f"[compose-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Check:
    def __init__(self, env_file: Path, work: Path):
        self.env_file, self.work = env_file, work
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        self.url = "http://" + env["ZICO_HTTP_PORT"]
        self.metrics_token = env["ZICO_METRICS_TOKEN"]
        self.token = ""
        self.times: list[tuple[str, float]] = []

    # --- plumbing ---------------------------------------------------------------------------------------------
    def compose(self, *args: str, project: str = PROJECT, extra: tuple[str, ...] = (), host: str = HOST1,
                check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
        cmd = ["docker-compose", "-p", project, "--env-file", str(self.env_file), *FILES, *extra, "--profile", "cpu",
               *args]
        env = {**os.environ, "ZICO_HOST": host, "ZICO_FIRST_HOST_NETWORK": f"{PROJECT}_default"}
        out = subprocess.run(cmd, cwd=REPO, env=env, text=True, capture_output=capture)
        if check and out.returncode != 0:
            raise CheckFailed(f"{' '.join(cmd[7:])} exited {out.returncode}: {(out.stderr or '')[-2000:]}")
        return out

    def manage(self, *args: str) -> str:
        return self.compose("exec", "-T", "web", "python", "manage.py", *args, capture=True).stdout

    def query(self, code: str):
        """Runs Python in the web container with Django set up; returns the JSON its last line prints."""
        out = self.manage("shell", "-c", code)
        return json.loads(out.strip().splitlines()[-1])

    def api(self, method: str, path: str, **kw):
        r = requests.request(method, self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30,
                             **kw)
        if r.status_code >= 400:
            raise CheckFailed(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json()

    def zico(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.work / "config")}
        return subprocess.run([sys.executable, "-m", "zico_cli", *args], cwd=self.work, env=env, text=True,
                              capture_output=True)

    def wait(self, what: str, done, timeout: float, every: float = 2.0):
        end = time.monotonic() + timeout
        while True:
            value = done()
            if value:
                return value
            if time.monotonic() > end:
                raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(every)

    def phase(self, name: str, fn) -> None:
        t0 = time.monotonic()
        log(f"phase {name} ...")
        fn()
        self.times.append((name, time.monotonic() - t0))
        log(f"phase {name}: {self.times[-1][1]:.1f} s")

    def healthy(self) -> bool:
        try:
            return requests.get(self.url + "/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def jobs(self, ids) -> dict:
        """{job id (str): {status, failure, hosts (of its placements, oldest first), timeline (points stored)}}."""
        return self.query("import json; from zico.jobs.models import Job; print(json.dumps({j.pk: {'status': "
                          "j.status, 'failure': str(j.failure_reason or ''), 'hosts': [p.device.node.host for p in "
                          "j.placements.order_by('id')], 'timeline': j.timeline.count()} for j in Job.objects.filter("
                          f"pk__in={sorted(ids)!r})}}))")

    # --- phases -----------------------------------------------------------------------------------------------
    def up(self) -> None:
        self.compose("up", "-d", "--no-build")
        self.wait("the web service's /healthz", self.healthy, 300)
        self.wait(f"the CPU worker of {HOST1} to register", lambda: self.devices().get(HOST1) == "online", 180)

    def devices(self) -> dict:
        return {d["host"]: d["status"] for d in self.query(
            "import json; from zico.cluster.models import Device; print(json.dumps([{'host': d.node.host, 'status': "
            "d.status} for d in Device.objects.all()]))")}

    def accounts(self) -> None:
        self.manage("tenant", "create", "check", "--name", "Compose check")
        self.manage("tenant", "add-member", "check", "alice", "--role", "owner", "--create-user")
        self.token = self.query("import json; from django.contrib.auth import get_user_model; from "
                                "zico.tenants.models import ApiToken; print(json.dumps(ApiToken.issue("
                                "get_user_model().objects.get(username='alice'), 'compose-check')[1]))")
        out = self.zico("login", self.url, "--token", self.token)
        if out.returncode != 0:
            raise CheckFailed(f"zico login: {out.stdout}{out.stderr}")

    def submit_catalog(self, name: str, iterations: int = 400) -> int:
        spec = {"name": name, "tenant": "check", **CATALOG}
        spec["params"] = {**spec["params"], "iterations": iterations}
        return self.api("POST", "/api/jobs/", json=spec)["id"]

    def submit_script(self) -> int:
        project = self.work / "probe"
        shutil.copytree(HERE / "probe", project, dirs_exist_ok=True)
        out = self.zico("submit", "--tenant", "check", "--name", "sandbox probe", str(project), "--", "python",
                        "train.py", "300")
        if out.returncode != 0:
            raise CheckFailed(f"zico submit: {out.stdout}{out.stderr}")
        found = re.search(r"Job (\d+) submitted", out.stdout)
        if not found:
            raise CheckFailed(f"zico submit printed no job id: {out.stdout}")
        return int(found.group(1))

    def colocated(self) -> None:
        self.catalog_job = self.submit_catalog("catalog job")
        self.script_job = self.submit_script()
        ids = (self.catalog_job, self.script_job)
        jobs = self.wait("the catalog job and the user script to end",
                         lambda: (lambda j: j if all(v["status"] in ENDED for v in j.values()) else None)(self.jobs(ids)),
                         900, every=5)
        log(f"jobs: {jobs}")
        for jid, job in jobs.items():
            if job["status"] != "succeeded":
                logs = self.zico("logs", str(jid))
                raise CheckFailed(f"job {jid} {job['status']}: {job['failure']}\n{logs.stdout[-3000:]}"
                                  f"{logs.stderr[-3000:]}")
        together = self.query(
            "import json; from zico.telemetry.models import TimelinePoint as T; s = [set(T.objects.filter(job_id=i, "
            f"allocated_bytes__gt=0).values_list('second', flat=True)) for i in {list(ids)!r}]; "
            "print(json.dumps(len(s[0] & s[1])))")
        if together < 1:
            raise CheckFailed("the catalog job and the user script never held memory on the device in the same second")
        log(f"co-located on the CPU worker: {together} s with both holding memory")
        self.sandbox_probe()

    def sandbox_probe(self) -> None:
        text = self.zico("logs", str(self.script_job)).stdout
        line = next((ln for ln in text.splitlines() if ln.startswith("SANDBOX-PROBE ")), None)
        if line is None:
            raise CheckFailed(f"the user script's log has no SANDBOX-PROBE line: {text[-2000:]}")
        seen = json.loads(line.split(" ", 1)[1])
        leaks = [f"env {k}" for k in seen["env"]] + [f"reached {k}" for k, v in seen["connect"].items()
                                                    if v == "connected"] + \
                [f"wrote {k}" for k, v in seen["write"].items() if v == "written"]
        if leaks or len(seen["connect"]) < 5 or len(seen["write"]) < 6:
            raise CheckFailed(f"the sandbox let through: {leaks} ({seen})")
        log(f"sandbox inside the worker container: environment {seen['environ']}, no secret; every connection "
            f"refused ({', '.join(seen['connect'])}); every write outside /job/output failed "
            f"({', '.join(seen['write'])}); uid {seen['uid']}")

    def pages(self) -> None:
        for path, headers, want in (("/", {}, (200, 302)), ("/healthz", {}, (200,)),
                                    ("/metrics", {"Authorization": f"Bearer {self.metrics_token}"}, (200,))):
            r = requests.get(self.url + path, headers=headers, timeout=30, allow_redirects=False)
            if r.status_code not in want:
                raise CheckFailed(f"GET {path}: {r.status_code}")
        metrics = requests.get(self.url + "/metrics", headers={"Authorization": f"Bearer {self.metrics_token}"},
                               timeout=30).text
        if "zico_" not in metrics:
            raise CheckFailed("/metrics answered without any zico_ metric")
        log(f"web page / and /healthz answer, /metrics {len(metrics)} bytes")

    def restart(self) -> None:
        before = self.jobs((self.catalog_job, self.script_job))
        self.compose("down")
        self.compose("up", "-d", "--no-build")
        self.wait("the web service after the restart", self.healthy, 300)
        after = self.jobs((self.catalog_job, self.script_job))
        if after != before or any(j["timeline"] == 0 for j in after.values()):
            raise CheckFailed(f"the jobs changed across down/up: before {before}, after {after}")
        log(f"after down/up the jobs and their timelines are kept: {after}")

    def second_host(self) -> None:
        extra = ("-f", str(HERE / "second-host.yml"))
        self.compose("up", "-d", "--no-deps", "--no-build", "cpu-worker", project=PROJECT2, extra=extra, host=HOST2)
        self.wait(f"the CPU worker of {HOST2} to register", lambda: self.devices().get(HOST2) == "online", 180)
        self.wait(f"the CPU worker of {HOST1} to be online", lambda: self.devices().get(HOST1) == "online", 180)
        ids = [self.submit_catalog(f"two hosts {n}", iterations=200) for n in range(4)]
        on2 = self.wait(f"a job running on {HOST2}", lambda: [i for i, j in self.jobs(ids).items()
                                                              if j["status"] == "running" and j["hosts"][-1:] == [HOST2]],
                        600, every=2)[0]
        log(f"job {on2} runs on {HOST2}: killing that host's worker container")
        self.compose("kill", "cpu-worker", project=PROJECT2, extra=extra, host=HOST2)
        jobs = self.wait("the jobs of both hosts to end", lambda: (lambda j: j if all(
            v["status"] in ENDED for v in j.values()) else None)(self.jobs(ids)), 900, every=5)
        log(f"jobs: {jobs}")
        bad = {i: j for i, j in jobs.items() if j["status"] != "succeeded"}
        if bad:
            raise CheckFailed(f"jobs that did not succeed: {bad}")
        hosts = {h for j in jobs.values() for h in j["hosts"]}
        if hosts != {HOST1, HOST2}:
            raise CheckFailed(f"the jobs were placed on {hosts}, not on both hosts")
        moved = jobs[on2]
        if moved["hosts"][-1] != HOST1 or HOST2 not in moved["hosts"]:
            raise CheckFailed(f"job {on2} was not requeued from {HOST2} to {HOST1}: {moved}")
        log(f"job {on2}: placed on {' then '.join(moved['hosts'])}, {moved['status']} on {HOST1} after {HOST2}'s "
            "worker was killed")

    def run(self) -> None:
        self.phase("up (first host, CPU worker)", self.up)
        self.phase("tenant, user and token (manage.py)", self.accounts)
        self.phase("catalog job and user script, co-located", self.colocated)
        self.phase("web page and /metrics", self.pages)
        self.phase("down, up: jobs and timelines kept", self.restart)
        self.phase("second worker host, requeue on its loss", self.second_host)
        for name, seconds in self.times:
            log(f"time {seconds:7.1f} s  {name}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        Check(Path(sys.argv[1]), Path(sys.argv[2])).run()
    except CheckFailed as e:
        log(f"FAILED: {e}")
        sys.exit(1)
