"""``scripts/demo.sh stop`` returns only once the processes it stops have exited: SIGTERM, a bounded wait
(``ZICO_STOP_WAIT_S``), SIGKILL for one that ignores SIGTERM; it names each process and how it stopped, and a
stale pid file is reported, not killed. Real processes, the real script."""
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                "time.sleep(120)")


def _start(argv):
    """A process reaped as soon as it exits (as demo.sh's processes are, by init), so no zombie lingers."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    reaped = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), reaped.set()), daemon=True).start()
    return proc, reaped


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_stop_waits_until_every_process_has_exited_and_says_how(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    polite, polite_gone = _start(["sleep", "120"])
    stubborn, stubborn_gone = _start([sys.executable, "-c", IGNORES_TERM])
    assert stubborn.stdout.readline().strip() == "ready"  # its SIGTERM handler is in place
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid file left by a process that has already ended
    for name, proc in (("scheduler", polite), ("worker", stubborn), ("consumer", gone)):
        (run / f"{name}.pid").write_text(str(proc.pid))
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "stop"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "ZICO_VAR_DIR": str(tmp_path),
                                                         "ZICO_STOP_WAIT_S": "1"})
        assert out.returncode == 0, out.stderr
        # when the script returns, both have exited (at most a zombie until our reaper thread wakes)
        assert not _running(polite.pid) and not _running(stubborn.pid)
        assert polite_gone.wait(timeout=10) and stubborn_gone.wait(timeout=10)
        assert polite.returncode == -signal.SIGTERM and stubborn.returncode == -signal.SIGKILL
        log = out.stderr
        assert f"stopped scheduler (pid {polite.pid}) in " in log
        assert f"worker (pid {stubborn.pid}) did not stop within 1 s of SIGTERM: killed" in log
        assert f"consumer (pid {gone.pid}) was not running" in log
        assert list(run.iterdir()) == []  # every pid file removed
    finally:
        for proc in (polite, stubborn):
            if proc.poll() is None:
                proc.kill()


def test_stop_with_nothing_running_says_nothing_and_succeeds(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "stop"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "ZICO_VAR_DIR": str(tmp_path)})
    assert out.returncode == 0 and out.stderr == ""
