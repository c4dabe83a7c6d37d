"""The user-script job process: a user's own, unmodified PyTorch training script run as one Zico job.

    python -m workers.job.entry --spec-file /zico/spec.json     (inside its sandbox, workers.agent.sandbox)

The spec is :mod:`zico_contracts.userjob`'s, with in-sandbox paths. In order:

1. die with the sandbox, open the control socket, install the allocator client before torch allocates
   anything (the agent's pool, CPU shim scope "all": every thread's CPU tensors, the script's own threads
   too, come from the pool; the script's main thread is bound to the job), send ``hello``;
2. hook torch (:class:`workers.job.stepclock.StepClock`, Note [Iterations of an unmodified script]), attach the
   ``zico`` API's sink (:mod:`zico_job`), start the stats thread (``stats`` at 5 Hz, ``metric`` at most once
   a second when something changed), send ``ready``;
3. run the command in this process (Note [The script runs in this process]);
4. ``done``: ``succeeded`` when the script returned or called ``sys.exit(0)``; ``failed`` with the exception
   (``Type: message (train.py, line 12)``, the allocator's out-of-memory report, the sandbox's limit an
   ``OSError`` ran into) or the exit code; ``cancelled`` / ``aborted`` when the agent stopped it (SIGTERM or a
   ``stop`` at an iteration start). The process then exits with the status ``python`` would have given the
   script (1 after an exception), which the agent adds to a failure's reason with the last stderr lines.

Note [The script runs in this process]
    The command (``python train.py ...``, ``python -m pkg.train ...``: :func:`zico_contracts.userjob.parse_command`)
    is not exec'd: this process runs the script with ``runpy`` (``sys.argv`` set, ``sys.path[0]`` the
    script's directory as ``python`` would have it, the code directory as the current one), so one process
    holds the allocator client and the control socket, installed before the script's first tensor, and the
    outcome comes from the script's own frame (its exception and line, its ``SystemExit`` code). A
    ``sitecustomize`` module on the job's path, run by whatever ``python`` the command execs, was the other
    way: it would run in every interpreter the command starts (a shell script calling python twice, a spawned
    worker), each claiming the same two sockets, and the outcome would have to be pieced together from an
    ``atexit`` hook and the exit status. The cost: only Python commands run (a first word that is neither
    ``python`` nor a ``.py`` file fails, as ``command not found`` when the sandbox has no such program),
    and the few ``python`` options that mean something in a job are accepted (``-u``, ``-B``, ``-m``).
    After the script, its non-daemon threads are joined and its ``atexit`` functions run, as at a normal
    interpreter exit; then ``done`` and ``os._exit`` (no teardown of torch and the allocator).

Note [Forked children of a job]
    A script's children made by ``fork`` (``DataLoader(num_workers=N)``'s workers, ``multiprocessing``) inherit
    the process's allocator, whose pool is the agent's memfd chunks mapped shared: a child's tensors would land in
    memory the parent's tensors use (a DataLoader's batches overwrote the model's weights: the loss became NaN).
    So a forked child allocates CPU tensors from torch's own allocator (the shim's scope "off", set as it
    starts): its memory is plain process memory, which the agent's watch of memory outside the allocator counts
    with the job's other processes (``workers.agent.agent``), and ``ZICO_JOB_NPROC`` bounds how many there are.
    Batches reach the parent through shared memory (``/dev/shm``, the job's scratch), as in any PyTorch run.
"""
from __future__ import annotations

import argparse
import atexit
import faulthandler
import gc
import json
import errno
import os
import resource
import runpy
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from zico_contracts.oom import describe_oom
from zico_contracts import agent as proto, cpushare, userjob

from . import control as link
from .stepclock import JobStopped, StepClock

STATS_INTERVAL_S = 0.2
METRIC_EVERY_S = 1.0
MAX_METRIC_KEYS = 200


class MetricSink:
    """Where ``zico.log`` and ``zico.set_iterations_total`` go: ``metric`` messages, the latest values at most
    once a second (the stats thread sends what waits), each with ``iterations_done``; and where
    ``zico.iteration()`` blocks go: the job's :class:`StepClock`."""

    def __init__(self, control: link.Control, clock: StepClock):
        self.control, self.clock = control, clock
        self.latest: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._last_sent = 0.0
        self._sent_steps = 0
        self._warned = False

    def log(self, values: dict[str, Any]) -> None:
        with self.clock.working():
            self._log(values)

    def _log(self, values: dict[str, Any]) -> None:
        with self._lock:
            for key, value in values.items():
                if key not in self.latest and len(self.latest) >= MAX_METRIC_KEYS:
                    if not self._warned:
                        self._warned = True
                        print(f"zico.log: more than {MAX_METRIC_KEYS} names; {key!r} and later new ones are dropped",
                              file=sys.stderr)
                    continue
                self.latest[key] = self._pending[key] = value if not isinstance(value, str) else value[:1000]
        if time.monotonic() - self._last_sent >= METRIC_EVERY_S:
            self.flush()

    def set_iterations_total(self, total: int) -> None:
        with self.clock.working():
            self.clock.total = total
            self.control.send("metric", values={"iterations_done": self.clock.steps}, iterations_total=total)

    def begin_iteration(self) -> None:  # zico.iteration(): Note [Explicit iterations] in workers.job.stepclock
        self.clock.block_begin()

    def end_iteration(self) -> None:
        self.clock.block_end()

    def flush(self) -> None:
        """Send what changed since the last ``metric`` (new values, iterations done); nothing otherwise, so a
        hung script sends nothing and the agent's hang watchdog sees it."""
        with self._lock:
            steps = self.clock.steps
            if not self._pending and steps == self._sent_steps:
                return
            values, self._pending = {**self._pending, "iterations_done": steps}, {}
            self._sent_steps, self._last_sent = steps, time.monotonic()
        self.control.send("metric", values=values)


def _stats_loop(control, clock: StepClock, sink: MetricSink, za, adev, stop: threading.Event) -> None:
    next_metric = time.monotonic() + METRIC_EVERY_S
    while not stop.wait(STATS_INTERVAL_S):
        try:
            st = za.memory_stats(device=adev)  # the whole process's pool: it is all this job's
            control.send("stats", allocated=int(st.get("allocated_bytes.all.current", 0)),
                         reserved=int(st.get("reserved_bytes.all.current", 0)),
                         peak_allocated=int(st.get("allocated_bytes.all.peak", 0)),
                         peak_reserved=int(st.get("reserved_bytes.all.peak", 0)),
                         iteration=clock.iteration, phase=clock.phase_name)
            if time.monotonic() >= next_metric:
                next_metric = time.monotonic() + METRIC_EVERY_S
                sink.flush()
        except OSError:
            return
        except Exception:  # stats are best effort; the script goes on
            continue


def where(exc: BaseException, code_dir: str) -> str:
    """`` (train.py, line 12)``: the innermost frame of the traceback inside the user's code, or ``""``."""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(code_dir + os.sep):
            found = f" ({os.path.relpath(frame.filename, code_dir)}, line {frame.lineno})"
    return found


def command_problem(spec: dict[str, Any]) -> tuple[str, int] | None:
    """Why the spec's command cannot start (checked before torch loads, so it fails in a moment) and the exit
    status a shell or python would give it (127 not found, 126 not runnable, 2 no such script), or None."""
    try:
        cmd = userjob.parse_command(spec["argv"])
    except userjob.CommandError as exc:
        return str(exc), 2
    if cmd.kind == "program":
        found = shutil.which(cmd.target)
        if found is None:
            return f"command not found: {cmd.target} ({userjob.RUNNABLE})", 127
        return f"{cmd.target} ({found}) is not a Python command: {userjob.RUNNABLE}", 126
    if cmd.kind == "script" and not os.path.isfile(os.path.join(spec["code_dir"], cmd.target)):
        return f"can't open file {cmd.target!r}: no such file in the job's code directory", 2
    return None


def run_command(spec: dict[str, Any]) -> None:
    """Run the spec's command in this process (Note [The script runs in this process]); returns when the
    script returned, raises what it raised. The command passed :func:`command_problem`."""
    cmd = userjob.parse_command(spec["argv"])
    code_dir = spec["code_dir"]
    os.chdir(code_dir)
    rest = [p for p in sys.path[1:] if p not in ("", os.getcwd())]
    if cmd.kind == "module":
        sys.argv = [cmd.target, *cmd.args]  # runpy puts the module's file there
        sys.path[:] = [code_dir, *rest]
        runpy.run_module(cmd.target, run_name="__main__", alter_sys=True)
        return
    path = os.path.join(code_dir, cmd.target)
    sys.argv = [cmd.target, *cmd.args]
    sys.path[:] = [os.path.dirname(os.path.abspath(path)), *rest]
    runpy.run_path(path, run_name="__main__")


def _finish_like_python() -> None:
    """What an interpreter does at a normal exit, short of its teardown: join the script's non-daemon threads,
    run its atexit functions, let its open files flush."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def exit_status(exc: BaseException | None) -> int:
    """The exit status ``python script.py`` would have had: 0 when it returned, was stopped or exited with 0 or
    None, its ``sys.exit`` code (1..255; 1 for a message or a code outside that range), 1 when it raised."""
    if exc is None or isinstance(exc, JobStopped):
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or code == 0:
            return 0
        return code if isinstance(code, int) and 0 < code < 256 else 1
    return 1


def print_traceback(exc: BaseException, code_dir: str) -> None:
    """The traceback as ``python script.py`` prints it: from the script's outermost frame on (without this
    module's and runpy's frames), or whole when no frame lies in ``code_dir``."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(code_dir + os.sep):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


def limit_note(exc: BaseException) -> str:
    """``"; the job reached the limit of 64 open files (ZICO_JOB_NOFILE)"``: the sandbox's limit an ``OSError`` ran into, or
    ``""``. EMFILE is the open-files limit and EFBIG the file size limit (python ignores SIGXFSZ, so a write
    past it fails with EFBIG); EAGAIN is the process limit only while this uid holds that many tasks (a
    non-blocking socket says EAGAIN too). Python's ``Thread.start`` says a failed ``pthread_create`` (EAGAIN) as
    ``RuntimeError("can't start new thread")``: the process limit too, on the same condition."""
    if isinstance(exc, RuntimeError) and str(exc) == "can't start new thread":
        code = errno.EAGAIN
    elif isinstance(exc, OSError) and exc.errno is not None:
        code = exc.errno
    else:
        return ""
    name = {errno.EMFILE: "nofile", errno.EFBIG: "fsize_bytes", errno.EAGAIN: "nproc"}.get(code)
    if name is None:
        return ""
    limit = userjob.LIMITS[name]
    soft = resource.getrlimit(getattr(resource, limit.resource))[0]
    if soft == resource.RLIM_INFINITY or (name == "nproc" and uid_tasks() < soft):
        return ""
    return f"; the job reached {limit.describe(soft)}"


def uid_tasks() -> int:
    """Threads of all processes of this process's uid that ``/proc`` shows (in the sandbox: the job's own)."""
    n, uid = 0, os.getuid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


def outcome(exc: BaseException | None, spec: dict[str, Any]) -> dict[str, Any]:
    """``done``'s status and reason for how the script ended (``exc`` None: it returned)."""
    if exc is None:
        return {"status": "succeeded"}
    if isinstance(exc, JobStopped):
        return {"status": exc.status, "reason": "cancelled on request" if exc.status == "cancelled" else "aborted"}
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or code == 0:
            return {"status": "succeeded"}
        if isinstance(code, int):
            return {"status": "failed", "reason": f"the script exited with code {code}"}
        print(code, file=sys.stderr)
        return {"status": "failed", "reason": f"the script exited: {str(code)[:1000]}"}
    print_traceback(exc, spec["code_dir"])
    reason = f"{type(exc).__name__}: {exc}"[:1500] + where(exc, spec["code_dir"]) + limit_note(exc)
    oom = link.last_oom(spec)
    return {"status": "failed", "reason": reason + (f" ({describe_oom(oom)})" if oom else "")}


def main(argv: list[str] | None = None) -> int:
    """Exit status (after ``done`` was sent) what ``python script.py`` would have had (:func:`exit_status`;
    the command's problem's: :func:`command_problem`), 2 for a bad spec."""
    ap = argparse.ArgumentParser(prog="python -m workers.job.entry", description="One Zico user-script job.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec-file", help="the job's spec as a JSON file (written into the sandbox by the agent)")
    src.add_argument("--spec", help="the job's spec as JSON")
    a = ap.parse_args(argv)
    link.die_with_parent(orphan_check=False)  # the parent is the sandbox's PID 1
    faulthandler.enable()  # a crash leaves its stack in the stderr tail the agent reports
    try:
        spec = json.loads(open(a.spec_file).read() if a.spec_file else a.spec)
    except (OSError, ValueError) as exc:
        print(f"workers.job.entry: unreadable spec: {exc}", file=sys.stderr)
        return 2
    job_id = spec["job"]
    os.environ.update(spec.get("env") or {})  # before torch loads: OMP_NUM_THREADS and the like count there
    unpinned = cpushare.pin_from_environment()  # the slot's cores (Note [Compute per slot]), before torch too
    if unpinned:
        print(f"zico: {unpinned}", file=sys.stderr)
    control = link.Control(int(os.environ[proto.CONTROL_FD_ENV]))
    problem = command_problem(spec)
    if problem:
        print(f"zico: {problem[0]}", file=sys.stderr)
        return _send_done(control, {"status": "failed", "reason": problem[0], "metrics": {}}, problem[1])
    za, adev = link.install_allocator(spec, scope="all")
    if adev == "cpu":  # Note [Forked children of a job]
        os.register_at_fork(after_in_child=lambda: za.set_cpu_scope("off"))
    control.send("hello", version=proto.PROTOCOL_VERSION, job_id=job_id, pid=os.getpid())
    clock = StepClock(control, job_id, za, spec.get("iterations"))
    clock.install()
    sink = MetricSink(control, clock)
    import zico_job

    zico_job._attach(sink)

    def on_sigterm(*_):
        control.request_stop("cancelled")
        if not clock.busy and clock.stopped is None:  # in a hook, the gate wait wakes and raises instead
            clock.stopped = control.stop_status or "cancelled"
            raise JobStopped(clock.stopped)

    signal.signal(signal.SIGTERM, on_sigterm)
    stop = threading.Event()
    threading.Thread(target=_stats_loop, args=(control, clock, sink, za, adev, stop), name="zico-stats",
                     daemon=True).start()
    profiler = None
    if spec.get("profile"):
        profiler = _Profiler(za, adev, job_id, spec["profile"], spec["scratch_dir"], control, clock)
        clock.after_end = profiler.after_end
    control.send("ready", resumed_from=0, iterations=spec.get("iterations") or 0)
    t0 = time.monotonic()
    error: BaseException | None = None
    try:
        with za.bind(job_id):
            run_command(spec)
    except BaseException as exc:  # everything the script can end with, SystemExit and JobStopped included
        error = exc
    # From here a SIGTERM only records the stop: a job whose script lingers in its threads or atexit
    # functions is killed after the grace period, and nothing of Zico's own ending is cut short.
    signal.signal(signal.SIGTERM, lambda *_: control.request_stop("cancelled"))
    done = outcome(error, spec)  # prints the traceback, as python would
    code = exit_status(error)
    if profiler is not None and done["status"] == "succeeded":  # ended before its profile was complete:
        profiler.complete()  # a curve from the iterations it had, when it had one past the warm-up
    stopped = isinstance(error, JobStopped)
    error = None  # the traceback's frames go, and with them the script's objects (its open files flush)
    if not stopped:
        with za.bind(job_id):
            _finish_like_python()
    stop.set()
    sink.flush()
    run_s = time.monotonic() - t0
    train_s = (clock.last_end - clock.first_begin) if clock.first_begin and clock.last_end else 0.0
    st = za.memory_stats(device=adev)
    metrics = {**sink.latest, "iterations_done": clock.steps, "run_s": round(run_s, 3), "train_s": round(train_s, 3),
               "iterations_per_s": round(clock.steps / train_s, 4) if train_s > 0 else None,
               "gate_delay_s": round(clock.delay_s, 4), "gate_waits": clock.delays,
               "peak_allocated_bytes": int(st.get("allocated_bytes.all.peak", 0)),
               "peak_reserved_bytes": int(st.get("reserved_bytes.all.peak", 0))}
    return _send_done(control, {**done, "metrics": link.plain(metrics)}, code)


PROFILE_TRACE = "profile-trace.json"  # in the scratch dir; read by workers.profiletrace (profiled_curve)


class _Profiler:
    """The profile of a script job's first iterations (Note [A script's profile is the start of its run] in
    workers.runner): drains the allocator's trace while the script runs; after ``warmup + steady`` iterations
    writes this job's records to ``<scratch>/profile-trace.json``, sends ``profiled`` (with ``peak_reserved``, the
    bytes its pool held at most so far) and stops tracing, and
    the script goes on. Past ``time_limit_s`` without them the run ends failed with that reason."""

    def __init__(self, za, adev, job_id: int, prof: dict[str, Any], scratch: str, control, clock: StepClock):
        self.za, self.adev, self.job_id, self.control, self.clock = za, adev, job_id, control, clock
        self.warmup = int(prof["warmup"])
        self.want = self.warmup + int(prof["steady"])
        self.limit = prof.get("time_limit_s")
        self.path = os.path.join(scratch, PROFILE_TRACE)
        self.records: list[list] = []
        self.t0 = time.monotonic()
        self.done = False
        self._lock = threading.Lock()
        za.drain_trace()  # setup's records before this point are not the job's iterations
        threading.Thread(target=self._loop, name="zico-profile", daemon=True).start()

    def _drain(self) -> None:
        with self._lock:
            if self.done:
                return
            for r in self.za.drain_trace():
                if r.job == self.job_id:
                    self.records.append([r.kind, r.timestamp_s, r.job_allocated_bytes, r.delta_bytes, r.iteration])

    def _loop(self) -> None:
        while not self.done:
            time.sleep(0.05)
            self._drain()

    def after_end(self, steps: int) -> None:
        if self.done:
            return
        elapsed = time.monotonic() - self.t0
        if steps >= self.want:
            self.complete()
        elif self.limit is not None and elapsed > self.limit:
            self._drain()
            _send_done(self.control, {
                "status": "failed", "metrics": {"profile_s": round(elapsed, 3), "profile_iterations": steps},
                "reason": f"profiling stopped after {elapsed:.0f} s and {steps} of {self.want} iterations: over the "
                          f"profiling time limit of {self.limit:g} s (ZICO_PROFILE_TIME_LIMIT_S)"})

    def complete(self) -> bool:
        """Write the trace and send ``profiled`` (once), when an iteration past the warm-up ones was traced;
        True when it did. Called after ``want`` iterations, or by a script that ended before them."""
        if self.done or self.clock.steps <= self.warmup:
            return False
        self._drain()
        with self._lock:
            self.done = True
            with open(self.path, "w") as f:
                json.dump(self.records, f)
            self.records = []
        held = int(self.za.memory_stats(device=self.adev).get("reserved_bytes.all.peak", 0))  # the pool's held peak
        self.control.send("profiled", iterations=self.clock.steps, profile_s=round(time.monotonic() - self.t0, 3),
                          peak_reserved=held)
        return True


def _send_done(control: link.Control, done: dict[str, Any], exit_code: int | None = None) -> int:
    """Send ``done`` and end the process with ``exit_code`` (default: 0 unless ``done`` failed, then 1)."""
    control.send("done", **done)
    control.sock.shutdown(socket.SHUT_WR)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code if exit_code is not None else int(done["status"] == "failed"))


if __name__ == "__main__":
    raise SystemExit(main())
