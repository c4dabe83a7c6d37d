"""``zico logs``: a job's output lines, and with ``-f`` its progress line (iterations done/total, rate, ETA,
memory) until the job has ended and its log is stored; the exit status is then the job's (zico_cli.errors).

Lines go to stdout (the job's stderr lines and the worker's notes to stderr), the progress line to stderr, so
``zico logs -f JOB > out.txt`` keeps the job's output alone. Polls ``GET /api/jobs/{id}/logs/?after=<cursor>``
every ``POLL_S`` (at once while the server says ``more``) and the job's memory timeline for the bytes.
"""
from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.live import Live
from rich.text import Text

from zico_contracts.oom import format_bytes

from .errors import EXIT_ERROR, JOB_EXIT, CliError

POLL_S = 1.0


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


def emit(line: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(line))
    else:
        click.echo(line["line"], err=line["stream"] != "stdout")


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
