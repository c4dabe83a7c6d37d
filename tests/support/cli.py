"""The `zico` command as a user runs it, for end-to-end tests: its own HOME (so its login is the test's), run from
the repository root with this interpreter."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def zico(home: Path, *args: str, timeout: float = 120, popen: bool = False):
    """Run ``zico *args`` with HOME (and XDG_CONFIG_HOME under it) at ``home``. Returns the CompletedProcess
    (output captured as text; subprocess.TimeoutExpired past ``timeout`` seconds), or with ``popen`` the running
    Popen with stdout and stderr piped."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    argv = [sys.executable, "-m", "zico_cli", *args]
    if popen:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
