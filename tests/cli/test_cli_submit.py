"""`zico login`, `zico submit`, `ls`, `status`, `cancel`, `download` against a real server: the token is checked
and kept 0600, the project is packed as .gitignore/.zicoignore say, errors are one clear line with exit 4."""
import io
import json
import os
import socket
import stat
import tarfile

import pytest

from zico.jobs.code import issue_job_token
from zico.jobs.models import Job
from zico_cli import config


def test_login_keeps_a_token_the_server_accepts_in_a_0600_file(zico, server, personas, token_of, home):
    token = token_of(personas.teammate)
    result = zico("login", server + "/", input=token + "\n")  # asked for when --token is left out
    assert result.exit_code == 0, result.output
    assert "acme (member)" in result.output
    path = home / "zico" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": server, "token": token}


def test_login_refuses_a_bad_token_and_an_absent_server_clearly(zico, server, home):
    result = zico("login", server, "--token", "zico_nope_nope")
    assert result.exit_code == 4 and "refused the token" in result.output
    assert not (home / "zico" / "config.json").exists()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = zico("login", f"http://127.0.0.1:{port}", "--token", "x")
    assert result.exit_code == 4 and f"cannot reach the Zico server at http://127.0.0.1:{port}" in result.output
    assert zico("ls").exit_code == 4 and "run `zico login URL` first" in zico("ls").output


def make_project(root):
    files = {"train.py": "print('train')\n", "model/net.py": "x = 1\n", "model/cache.pyc": "junk",
             "keep.pyc": "wanted", "data/big.bin": "0" * 1000, "secrets.txt": "token", "notes/draft.md": "wip",
             "notes/final.md": "done", ".git/HEAD": "ref", ".gitignore": "*.pyc\ndata/\n",
             ".zicoignore": "!keep.pyc\nsecrets.txt\n", "notes/.gitignore": "draft.md\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_submit_packs_the_project_as_its_ignore_files_say_and_queues_the_command(zico, signed_in, tmp_path):
    project = make_project(tmp_path / "proj")
    result = zico("submit", "--name", "cli run", "--budget", "1GiB", "--priority", "3", "--env", "SEED=1",
                  "--env", "NOTE=a=b", project, "--", "python", "train.py", "--lr", "0.1")
    assert result.exit_code == 0, result.output
    job = Job.objects.get(name="cli run")
    assert f"{signed_in['url']}/jobs/{job.pk}/" in result.output
    assert job.command == ["python", "train.py", "--lr", "0.1"] and job.env == {"SEED": "1", "NOTE": "a=b"}
    assert (job.budget_bytes, job.priority, job.owner.username, job.status) == (1 << 30, 3, "teammate", "queued")
    with tarfile.open(job.code.path) as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == [".gitignore", ".zicoignore", "keep.pyc", "model/net.py", "notes/.gitignore", "notes/final.md",
                     "train.py"]


def test_submit_json_and_a_refused_spec(zico, signed_in, tmp_path):
    project = make_project(tmp_path / "proj")
    result = zico("submit", "--json", project, "--", "python", "train.py")
    body = json.loads(result.stdout)
    assert result.exit_code == 0 and body["job"]["command"] == ["python", "train.py"]
    assert body["archive"]["files"] == 7 and body["url"].endswith(f"/jobs/{body['job']['id']}/")
    before = Job.objects.count()
    result = zico("submit", "--env", "LD_PRELOAD=/x.so", project, "--", "python", "train.py")
    assert result.exit_code == 4 and "env.LD_PRELOAD: reserved" in result.output and "HTTP 400" in result.output
    assert Job.objects.count() == before
    assert zico("submit", "--budget", "lots", project, "--", "x").exit_code == 2  # a usage error


def test_ls_status_cancel(zico, signed_in, tmp_path):
    job_id = json.loads(zico("submit", "--json", "--name", "to cancel", make_project(tmp_path / "p"), "--",
                             "python", "train.py").stdout)["job"]["id"]
    listed = json.loads(zico("ls", "--json").stdout)
    assert [j["id"] for j in listed] == [job_id]
    assert "to cancel" in zico("ls").output and "python train.py" in zico("status", job_id).output
    assert json.loads(zico("status", "--json", job_id).stdout)["status"] == "queued"
    assert zico("cancel", job_id).exit_code == 0 and Job.objects.get(pk=job_id).status == "cancelled"
    again = zico("cancel", job_id)
    assert again.exit_code == 4 and "has already ended" in again.output and "HTTP 409" in again.output
    missing = zico("status", 999999)
    assert missing.exit_code == 4 and "HTTP 404" in missing.output


def test_download_fetches_the_outputs_the_worker_uploaded(zico, signed_in, tmp_path, server, client_for_worker):
    job_id = json.loads(zico("submit", "--json", make_project(tmp_path / "p"), "--", "true").stdout)["job"]["id"]
    for path, data in [("ckpt/model.pt", b"\x00" * 10), ("metrics.json", b"{}")]:
        client_for_worker(job_id, path, data)
    out = tmp_path / "got"
    result = zico("download", job_id, "-o", out)
    assert result.exit_code == 0, result.output
    assert (out / "ckpt" / "model.pt").read_bytes() == b"\x00" * 10 and (out / "metrics.json").read_bytes() == b"{}"
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["metrics.json", "model.pt"]  # no .part left
    assert "downloading" in result.stderr and "12 bytes" in result.stderr, result.stderr  # the bar, on stderr
    only = json.loads(zico("download", "--json", job_id, "ckpt", "-o", tmp_path / "only").stdout)
    assert [f["path"] for f in only] == ["ckpt/model.pt"]  # stdout is the JSON alone: the bar is off with --json
    assert zico("download", job_id, "nothing-here").exit_code == 4


def test_output_files_over_the_limits_are_named_in_the_log_and_by_download(zico, signed_in, tmp_path, server):
    # the worker's upload (workers.usercode, to the real worker-facing API) keeps what its limits allow and says
    # what it did not keep: in the job's metrics, in lines for the job's log, and `zico download` warns of them
    from workers import usercode
    from zico_contracts.codejob import CodeSpec

    job_id = json.loads(zico("submit", "--json", make_project(tmp_path / "p"), "--", "true").stdout)["job"]["id"]
    outputs = tmp_path / "outputs"
    (outputs / "ckpt").mkdir(parents=True)
    (outputs / "small.txt").write_bytes(b"s" * 10)
    (outputs / "ckpt" / "huge.pt").write_bytes(b"h" * 100)
    code = CodeSpec.from_spec({"code_url": f"{server}/unused", "code_sha256": "ab" * 32, "code_format": "tar.gz",
                               "code_size_bytes": 1,
                               "files_url": f"{server}/api/worker/jobs/{job_id}/files/",
                               "job_token": issue_job_token(job_id), "output_limits": {"max_file_bytes": 50},
                               "command": ["true"], "env": {}})
    uploaded = usercode.upload_outputs(code, outputs)
    assert (uploaded["output_files"], uploaded["output_bytes"], uploaded["output_skipped_count"]) == (1, 10, 1)
    assert uploaded["output_skipped"] == ["ckpt/huge.pt: over the output limits (1000 files, 1073741824 bytes, "
                                          "50 bytes a file)"]
    assert usercode.skipped_lines(uploaded) == ["1 output file not kept:", "  " + uploaded["output_skipped"][0]]
    Job.objects.filter(pk=job_id).update(metrics=uploaded)  # as job_finished stores the run's metrics
    result = zico("download", job_id, "-o", tmp_path / "got")
    assert result.exit_code == 0 and (tmp_path / "got" / "small.txt").read_bytes() == b"s" * 10
    assert f"warning: 1 output file of job {job_id} was not kept:\n  ckpt/huge.pt: over the output limits" \
        in result.stderr, result.stderr
    every = {"output_files": 0, "output_bytes": 0, "output_skipped": [f"f{i}: x" for i in range(20)],
             "output_skipped_count": 25}
    assert usercode.skipped_lines(every)[0] == "25 output files not kept (the first 20 below)"
    assert usercode.skipped_lines({"output_files": 3, "output_bytes": 9}) == []


@pytest.fixture
def client_for_worker(server):
    import requests

    def upload(job_id, path, data):
        r = requests.post(f"{server}/api/worker/jobs/{job_id}/files/", data={"path": path},
                          files={"file": ("f", io.BytesIO(data))},
                          headers={"Authorization": f"JobToken {issue_job_token(job_id)}"}, timeout=10)
        assert r.status_code == 201, r.text

    return upload


def test_the_console_script_runs_as_its_own_process(zico_process, signed_in):
    p = zico_process("ls", "--json")
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0 and json.loads(stdout) == [], stderr
    assert config.load()["url"] == signed_in["url"] and os.environ.get("XDG_CONFIG_HOME")


def test_an_unchanged_project_packs_to_the_same_bytes(tmp_path):
    """Note [Same files, same archive]: a rerun of the same code is an identical job (its curve is reused)."""
    import hashlib

    from zico_cli.pack import pack

    root = tmp_path / "p"
    (root / "sub").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "sub" / "data.txt").write_text("1 2 3\n")
    pack(root, tmp_path / "a.tar.gz")
    os.utime(root / "train.py", (1, 1))  # a checkout or a copy changes file times, not content
    pack(root, tmp_path / "b.tar.gz")
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.tar.gz", "b.tar.gz")]
    assert digest[0] == digest[1]
    (root / "train.py").write_text("print('bye')\n")
    pack(root, tmp_path / "c.tar.gz")
    assert hashlib.sha256((tmp_path / "c.tar.gz").read_bytes()).hexdigest() != digest[0]
    with tarfile.open(tmp_path / "c.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["sub/data.txt", "train.py"]


def test_submit_time_limit_is_the_jobs_wall_clock_limit_and_one_above_the_tenants_is_refused(
        zico, signed_in, personas, tmp_path):
    project = make_project(tmp_path / "proj")
    result = zico("submit", "--name", "limited", "--time-limit", "1h30m", project, "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    job = Job.objects.get(name="limited")
    assert (job.time_limit_s, job.time_limit_source) == (5400.0, "job")
    status = zico("status", "--json", job.pk)
    assert status.exit_code == 0, status.output
    assert (json.loads(status.stdout)["time_limit_s"], json.loads(status.stdout)["time_limit_source"]) == (5400.0, "job")
    assert "1 h 30 min (the job's own limit)" in zico("status", job.pk).output
    personas.tenant.change(max_time_limit_s=3600)
    before = Job.objects.count()
    result = zico("submit", "--time-limit", "2h", project, "--", "python", "train.py")
    assert result.exit_code == 4 and "time_limit_s: 7200 s is above tenant acme's maximum of 3600 s" in result.output
    assert Job.objects.count() == before
    result = zico("submit", "--time-limit", "soon", project, "--", "python", "train.py")
    assert result.exit_code == 2 and "--time-limit" in result.output  # a usage error naming the flag
