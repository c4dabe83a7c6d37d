"""``zico logs``: a job's output lines, and with ``-f`` its progress line (iterations done/total, rate, ETA,
memory) until the job has ended and its log is stored; the exit status is then the job's (zico_cli.errors).

Lines go to stdout (the job's stderr lines and the worker's notes to stderr), the progress line to stderr, so
``zico logs -f JOB > out.txt`` keeps the job's output alone. The platform's own lines (stream ``system``, which
no job can write) read ``[zico] ...``, and no job line can pass for one (:func:`render`). Polls
``GET /api/jobs/{id}/logs/?after=<cursor>`` every ``POLL_S`` (at once while the server says ``more``) and the
job's memory timeline for the bytes.
"""
from __future__ import annotations

import json
import re
import sys
import time

import click
from rich.console import Console
from rich.live import Live
from rich.text import Text

from zico_contracts.oom import format_bytes

from .errors import EXIT_ERROR, JOB_EXIT, CliError

POLL_S = 1.0
SYSTEM_MARK = "[zico] "  # before each of the platform's own lines
JOB_MARK = "[job] "      # before a job's line that starts like one of the platform's
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")  # a tab is kept


def human_bytes(n: float | None) -> str:
    """Bytes as the web pages show them (``zico_contracts.oom.format_bytes``: ``"1.50 GiB"``); ``—`` for none."""
    return "—" if n is None else format_bytes(n)


def progress_text(job: dict, allocated: int | None) -> str:
    """One line: ``running · iteration 40/120 · 3.2 it/s · ETA 25 s · allocated 1.2 GiB``, or, while the job's
    environment is built, ``placed · preparing its environment · <the installer's latest line>``."""
    done, total = job.get("iteration"), job.get("iterations")
    if job.get("preparing"):  # the job's own environment is being built (its installer's latest line)
        return f"{job.get('status', '?')} · preparing its environment · {job['preparing']}"
    parts = [job.get("status", "?"), f"iteration {done}/{total}" if total else f"iteration {done}"]
    if job.get("iterations_per_s"):
        parts.append(f"{job['iterations_per_s']:.2f} it/s")
    if job.get("eta_s") is not None:
        parts.append(f"ETA {job['eta_s']:.0f} s")
    if allocated is not None:
        parts.append(f"allocated {human_bytes(allocated)}")
    return " · ".join(parts)


class Memory:
    """The job's latest allocated bytes from its timeline (GET /api/jobs/{id}/timeline/, with its cursor)."""

    def __init__(self, api, job_id: int):
        self.api, self.job_id, self.cursor, self.allocated = api, job_id, None, None

    def poll(self) -> int | None:
        try:
            body = self.api.get(f"/api/jobs/{self.job_id}/timeline/", window=300, cursor=self.cursor)
        except CliError:  # the bytes are a nicety: a failed read keeps the last figure
            return self.allocated
        self.cursor = (body.get("live") or {}).get("cursor") or self.cursor
        if body.get("points"):
            self.allocated = body["points"][-1][1]
        return self.allocated


def escape_controls(text: str) -> str:
    """``text`` with its control characters but tabs (ANSI escapes, carriage returns, ...) written as escapes
    (``\\x1b``), so it prints as one line and moves no cursor."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", text)


def render(line: dict, terminal: bool) -> str:
    """One log line as ``zico logs`` prints it. A platform line (stream ``system``): ``[zico] <text>``, its
    control characters escaped. A job's line: as the job printed it, but ``[job] `` before one that starts with
    ``[zico]`` as it shows (click drops ANSI styles off a terminal, so ``\\x1b[2K[zico]`` shows as ``[zico]``;
    leading blanks and control characters do not count), and, on a terminal, its control characters escaped (an
    ANSI escape could otherwise move the cursor and rewrite the lines above as the platform's)."""
    text = line.get("line", "")
    if line.get("stream") == "system":
        return SYSTEM_MARK + escape_controls(text)
    if _CONTROL.sub("", click.unstyle(text)).lstrip().startswith(SYSTEM_MARK.rstrip()):
        text = JOB_MARK + text
    return escape_controls(text) if terminal else text


def emit(line: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(line))
        return
    err = line["stream"] != "stdout"
    terminal = (sys.stderr if err else sys.stdout).isatty()
    text = render(line, terminal)
    click.echo(click.style(text, dim=True) if line["stream"] == "system" and terminal else text, err=err)


def show_logs(api, job_id: int, follow: bool, as_json: bool) -> int:
    """Print the job's lines (all of them; then, with ``follow``, the new ones until it ends). Returns the exit
    status: 0 without ``follow``, else the job's (0 succeeded, 1 failed, 3 cancelled)."""
    path = f"/api/jobs/{job_id}/logs/"
    cursor, page, first = None, None, True
    memory = Memory(api, job_id)
    console = Console(stderr=True)
    status = Text("")
    live = Live(status, console=console, transient=False, auto_refresh=False) if follow and not as_json else None
    try:
        if live:
            live.start()
        while True:
            page = api.get(path, after=cursor)
            for line in page["lines"]:
                emit(line, as_json)
            if page.get("note") and first:
                click.echo(f"({page['note']})", err=True)
            cursor, first = page["cursor"] or cursor, False
            if page["more"]:
                continue
            if not follow or page["complete"]:
                break
            if live:
                status.plain = progress_text(page["job"], memory.poll())
                live.refresh()
            time.sleep(POLL_S)
        if live:
            status.plain = progress_text(page["job"], memory.allocated)
            live.refresh()
    finally:
        if live:
            live.stop()
    if not follow:
        return 0
    if as_json:
        click.echo(json.dumps({"job": page["job"]}))
    return JOB_EXIT.get(page["job"]["status"], EXIT_ERROR)
