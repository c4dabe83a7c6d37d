"""The user-script job's contracts, without running a script: the spec and command rules
(zico_contracts.userjob), the job-side ``zico`` API (zico_job) and its import name, the protocol's new field,
the agent's knobs, its output lines and exit descriptions, and its refusal when no sandbox can run."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workers.agent import AgentSettings, DeviceAgent, JobRun
from workers.agent.agent import failure_reason, reason_summary
from workers.agent.launch import describe_exit
from workers.agent.output import LineCutter
from zico_contracts import agent as proto
from zico_contracts import userjob
from zico_contracts.keys import REASON_MAX_CHARS

ROOT = Path(__file__).resolve().parents[2]


def spec(**over):
    return {"kind": "script", "code_dir": "/srv/code", "argv": ["python", "train.py"], "device": "cpu",
            "output_dir": "/srv/out", "scratch_dir": "/srv/scratch", **over}


@pytest.mark.parametrize("argv, kind, target, args", [
    (["python", "train.py", "--epochs", "2"], "script", "train.py", ("--epochs", "2")),
    (["python3.11", "-u", "-B", "src/train.py"], "script", "src/train.py", ()),
    (["/usr/bin/python3", "-m", "pkg.train", "-m", "x"], "module", "pkg.train", ("-m", "x")),
    (["train.py", "--lr", "1e-3"], "script", "train.py", ("--lr", "1e-3")),
    (["bash", "run.sh"], "program", "bash", ("run.sh",)),
])
def test_commands_a_job_can_be_given(argv, kind, target, args):
    cmd = userjob.parse_command(argv)
    assert (cmd.kind, cmd.target, cmd.args) == (kind, target, args)


@pytest.mark.parametrize("argv, message", [
    ([], "non-empty list"),
    ("python train.py", "non-empty list"),
    (["python", 3], "non-empty list"),
    (["python", "-O", "train.py"], "python option -O is not supported"),
    (["python", "-m"], "python -m needs a module name"),
    (["python", "-u"], "python needs a script"),
])
def test_commands_that_cannot_run_say_why(argv, message):
    with pytest.raises(userjob.CommandError, match=message):
        userjob.parse_command(argv)


@pytest.mark.parametrize("over, field", [
    ({"kind": "catalog"}, "kind"),
    ({"code_dir": "relative/code"}, "code_dir"),
    ({"output_dir": None}, "output_dir"),
    ({"data_dir": 3}, "data_dir"),
    ({"argv": ["python", "-X", "dev", "t.py"]}, "argv"),
    ({"env": {"ZICO_CONTROL_FD": "3"}}, "env"),
    ({"env": {"PYTHONPATH": "/x"}}, "env"),
    ({"env": {"bad-name": "1"}}, "env"),
    ({"env": {"OK": 1}}, "env"),
    ({"device": "tpu"}, "device"),
    ({"iterations": -1}, "iterations"),
])
def test_a_malformed_spec_names_its_field(over, field):
    with pytest.raises(userjob.SpecError) as err:
        userjob.validate_spec(spec(**over))
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


def test_a_good_spec_passes_with_its_optional_fields():
    s = spec(env={"OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}, data_dir="/srv/data", iterations=100,
             device="cuda:1")
    assert userjob.validate_spec(s) is s


def test_metric_may_carry_the_scripts_total_iteration_count():
    assert proto.decode(proto.encode("metric", values={"loss": 1.0}, iterations_total=40))["iterations_total"] == 40
    with pytest.raises(proto.ProtocolError, match="iterations_total"):
        proto.encode("metric", values={}, iterations_total=-1)


def test_zico_job_values_are_plain_and_calls_outside_a_job_do_nothing():
    import zico_job

    got = []

    class Sink:
        def log(self, values):
            got.append(values)

        def set_iterations_total(self, total):
            got.append(total)

    assert not zico_job.running()
    zico_job.log(loss=1.0)  # no sink: nothing happens, nothing raises
    with pytest.raises(ValueError, match="'train_s' is a figure the platform measures"):
        zico_job.log(train_s=3.0)  # the same rule outside a job: a script fails on a laptop as in a job
    zico_job._attach(Sink())
    try:
        zico_job.log(loss=np.float32(0.5), step=3, ok=True, lr=float("nan"), note=None)
        zico_job.set_iterations_total(7)
        with pytest.raises(TypeError, match="hist=\\[1, 2\\] is not a number"):
            zico_job.log(hist=[1, 2])
        with pytest.raises(ValueError, match="expected an integer >= 0"):
            zico_job.set_iterations_total(-2)
        # the platform's own figures are refused by name, and the call sends none of its values
        for name in ("iterations_done", "slowdown", "compute_share", "peak_reserved_bytes", "delay_s"):
            with pytest.raises(ValueError, match=f"'{name}' is a figure the platform measures"):
                zico_job.log(loss=0.1, **{name: 1})
        with pytest.raises(ValueError, match="a metric name is a string of 1 to 100 characters"):
            zico_job.log(**{"x" * 101: 1})
    finally:
        zico_job._attach(None)
    assert got == [{"loss": 0.5, "step": 3, "ok": True, "lr": "nan", "note": None}, 7]


def test_zico_iteration_blocks_reach_the_sink_even_when_the_body_raises_and_do_nothing_outside_a_job():
    import zico_job

    with zico_job.iteration():  # outside a job: nothing happens, nothing raises
        pass
    calls = []

    class Sink:
        def begin_iteration(self):
            calls.append("begin")

        def end_iteration(self):
            calls.append("end")

    zico_job._attach(Sink())
    try:
        with zico_job.iteration():
            calls.append("body")
        with pytest.raises(ValueError):
            with zico_job.iteration():
                raise ValueError("bad batch")
    finally:
        zico_job._attach(None)
    assert calls == ["begin", "body", "end", "begin", "end"]


def test_explicit_iteration_blocks_do_not_nest_and_are_the_clock_from_the_first_on():
    # Note [Explicit iterations] in workers/job/stepclock.py, on the clock itself (the control socket recorded)
    from workers.job.stepclock import StepClock

    class Control:
        def __init__(self):
            self.sent = []

        def begin(self, i):
            self.sent.append(("iteration_begin", i))
            return 0.0

        def send(self, msg_type, /, **fields):  # as JobControl.send: a mark's own field is named kind
            self.sent.append((f"mark {fields['kind']}" if msg_type == "mark" else msg_type, fields.get("iteration")))

    control = Control()
    clock = StepClock(control, 5, za=None)
    clock.block_begin()
    with pytest.raises(RuntimeError, match="do not nest"):
        clock.block_begin()
    clock.block_end()
    clock.block_begin()
    clock.block_end()
    assert clock.steps == 2 and clock.explicit
    assert control.sent == [("iteration_begin", 0), ("mark forward", 0), ("iteration_end", 0),
                            ("iteration_begin", 1), ("mark forward", 1), ("iteration_end", 1)]


def test_import_zico_in_a_job_is_the_job_api_and_needs_only_the_standard_library():
    # the job's import path (workers.agent.sandbox.IMPORT_PATH): the repo root and the shim, never platform/
    code = ("import sys, zico; import zico_job; "
            "print(zico.log is zico_job.log, zico.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'torch', 'numpy')))")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{ROOT}:{ROOT / 'zico_job' / 'shim'}"}
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    assert lines[0] == f"True {ROOT / 'zico_job' / 'shim' / 'zico' / '__init__.py'}"
    assert lines[1] == "[]"


def test_output_lines_are_cut_at_the_cap_and_split_at_carriage_returns():
    c = LineCutter(10)
    assert c.feed(b"short\nprogress 1%\rprogress 2%\r\n") == [
        "short", "progress 1... [1 bytes cut]", "progress 2... [1 bytes cut]"]
    assert c.feed(b"x" * 25) == []  # nothing held beyond the cap while the line goes on
    assert c.feed(b"yy\nend") == ["xxxxxxxxxx... [17 bytes cut]"]
    assert c.feed(b"\xff\n") == ["end\ufffd"]
    assert c.feed(b"tail") == [] and c.close() == ["tail"] and c.close() == []
    assert LineCutter(4).feed(b"\r\n\n") == ["", ""]  # \r ends a line, its \n nothing more; then an empty line


def test_exit_statuses_through_the_sandbox_read_as_signals():
    assert describe_exit(-11) == "killed by signal SIGSEGV"
    assert describe_exit(139) == "exited with code 139"
    assert describe_exit(139, sandboxed=True) == "killed by signal SIGSEGV"
    assert describe_exit(128 + 24, sandboxed=True) == "killed by signal SIGXCPU"  # the agent names the limit
    assert describe_exit(3, sandboxed=True) == "exited with code 3"


@pytest.mark.parametrize("name, value, message", [
    ("ZICO_JOB_NOFILE", "lots", "ZICO_JOB_NOFILE: expected a whole number, got 'lots'"),
    ("ZICO_JOB_NPROC", "2", "ZICO_JOB_NPROC: expected a number >= 16"),
    ("ZICO_JOB_UID_BASE", "4294967000", "must lie within"),
    ("ZICO_JOB_OUTPUT_LINE_BYTES", "-5", "expected a whole number"),
    ("ZICO_JOB_DISK_BYTES", "4096", "ZICO_JOB_DISK_BYTES: expected a number >= 1048576"),
])
def test_sandbox_knobs_are_parsed_strictly(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        AgentSettings.from_env()


def test_sandbox_knobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("ZICO_JOB_CPU_S", "3600")
    monkeypatch.setenv("ZICO_JOB_UID_BASE", "500000")
    monkeypatch.setenv("ZICO_JOB_UID_COUNT", "1000")
    monkeypatch.setenv("ZICO_JOB_DISK_BYTES", str(10 << 30))
    s = AgentSettings.from_env()
    assert s.cpu_s == 3600 and s.job_uid(7) == 500007 and s.job_uid(1007) == 500007 and s.disk_bytes == 10 << 30


def test_without_bubblewrap_a_catalog_job_runs_the_same_job_process_unwrapped(tmp_path):
    # Note [No sandbox for Zico's own code]: the catalog project, by the same entry and spec as in a sandbox,
    # its argv without bwrap; a user's script on the same agent is still refused
    from types import SimpleNamespace

    from workers.runner import catalog_script_spec

    agent = DeviceAgent("cpu", 1 << 30, 1 << 30, None, AgentSettings(bwrap=str(tmp_path / "no-bwrap")))
    rt = SimpleNamespace(torch_device="cpu", agent=agent, config=SimpleNamespace(
        data_dir=tmp_path / "data", checkpoint_dir=tmp_path / "ckpt", var_dir=tmp_path / "var",
        checkpoint_every_s=None))
    job = SimpleNamespace(job=53, workload="digits-cnn", params={"batch_size": 8, "iterations": 3}, job_created_at=None)
    _, proc_spec = catalog_script_spec(rt, job)
    seen = []
    try:
        run = JobRun(53, proc_spec, on_message=seen.append)
        out = agent.run(run)
        refused = agent.run(JobRun(54, spec(code_dir=str(tmp_path), output_dir=str(tmp_path / "o"),
                                            scratch_dir=str(tmp_path / "s"))))
    finally:
        agent.close()
    assert out["status"] == "succeeded", out
    assert out["metrics"]["iterations_done"] == 3 and out["pid"] == run.job_pid  # no wrapper: the job's own pid
    hello = next(m for m in seen if m["type"] == "hello")
    assert hello["pid"] == run.job_pid
    assert refused["status"] == "failed" and "bubblewrap was not found" in refused["reason"]


def test_without_bubblewrap_user_scripts_are_refused_and_nothing_starts(tmp_path):
    agent = DeviceAgent("cpu", 1 << 28, 1 << 28, None, AgentSettings(bwrap=str(tmp_path / "no-bwrap")))
    seen = []
    try:
        assert "bubblewrap was not found" in agent.user_code_refusal()
        out = agent.run(JobRun(51, spec(code_dir=str(tmp_path), output_dir=str(tmp_path / "o"),
                                        scratch_dir=str(tmp_path / "s")), on_message=seen.append))
        bad = agent.run(JobRun(52, spec(argv=["python", "-c", "print(1)"])))
    finally:
        agent.close()
    assert out["status"] == "failed" and out["pid"] is None
    assert out["reason"].startswith("user scripts run only in a sandbox, and bubblewrap was not found at")
    assert not seen and not agent.jobs() and not (tmp_path / "o").exists()
    assert bad["status"] == "failed" and bad["reason"].startswith("argv: python option -c is not supported")


def test_a_crash_is_placed_at_the_users_line_from_faulthandlers_stack():
    from workers.agent.launch import crash_site

    tail = ["Fatal Python error: Segmentation fault", "", "Thread 0x7f (most recent call first):",
            '  File "/job/code/loader.py", line 40 in worker', "", "Current thread 0x7e (most recent call first):",
            '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at',
            '  File "/job/code/lib/ext.py", line 7 in poke', '  File "/job/code/train.py", line 13 in <module>',
            '  File "<frozen runpy>", line 88 in _run_code']
    assert crash_site(tail, "/job/code") == " (lib/ext.py, line 7)"
    assert crash_site(tail[:5], "/job/code") == ""


def test_the_job_side_modules_import_on_the_sandboxes_path_without_the_web_side():
    # what a sandboxed job process imports before the user's script runs: nothing from platform/ (placement,
    # zico) may be needed, since the sandbox does not mount it (workers.agent.sandbox.JOB_SIDE_DIRS), nor any
    # module of workers/ outside its job package
    code = ("import sys, workers.job.entry, workers.job.stepclock, workers.job.checkpoints; "
            "print(sorted({m for m in sys.modules if m.split('.')[0] in {'placement', 'zico', 'django', 'celery'}"
            " or (m.startswith('workers.') and not m.startswith('workers.job'))}))")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{ROOT}:{ROOT / 'zico_job' / 'shim'}"}
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_sandbox_mounts_only_the_job_package_of_workers(tmp_path):
    # the bwrap command of a real job's sandbox: of the repository it binds the job-side folders only, and of
    # workers/ only workers/job (the host side, its settings and tools stay out of reach of a job's code)
    from workers.agent import sandbox

    if sandbox.refusal(AgentSettings().bwrap):
        pytest.skip("no sandbox can run on this host")
    (tmp_path / "code").mkdir()
    box = sandbox.Sandbox.for_job(5, spec(code_dir=str(tmp_path / "code"), output_dir=str(tmp_path / "out"),
                                          scratch_dir=str(tmp_path / "scratch")), AgentSettings())
    argv, _, fds = box.command("workers.job.entry", {})
    for fd in fds:
        os.close(fd)
    sources = {argv[i + 1] for i, a in enumerate(argv) if a in ("--ro-bind", "--ro-bind-try", "--bind")}
    repo = {os.path.relpath(s, sandbox.REPO) for s in sources if s.startswith(str(sandbox.REPO) + os.sep)}
    assert {r for r in repo if r.split(os.sep)[0] == "workers"} == {os.path.join("workers", "job")}
    assert "platform" not in {r.split(os.sep)[0] for r in repo}
    assert argv[argv.index("-m") + 1] == "workers.job.entry"


def test_a_failure_reason_is_its_headline_how_it_ended_and_the_last_stderr_lines_that_fit():
    tail = "\n".join(f"line {i} " + "x" * 190 for i in range(20))
    reason = failure_reason("ValueError: bad (train.py, line 3)", "exited with code 1", tail)
    lines = reason.splitlines()
    assert lines[:2] == ["ValueError: bad (train.py, line 3)", "exited with code 1"]
    kept = lines[3:]
    assert len(reason) <= REASON_MAX_CHARS and lines[2] == f"last {len(kept)} lines of stderr:"
    assert 5 < len(kept) < 20 and kept == tail.splitlines()[-len(kept):]  # the newest lines, the oldest dropped
    assert reason_summary(reason) == "ValueError: bad (train.py, line 3)\nexited with code 1"
    # the exit is not repeated when the headline says it; no stderr, no heading
    assert failure_reason("the script exited with code 3", "exited with code 3", "") == "the script exited with code 3"
    assert failure_reason("hung", "killed by signal SIGKILL", "oops") == \
        "hung\nkilled by signal SIGKILL\nlast line of stderr:\noops"
