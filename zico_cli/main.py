"""The ``zico`` commands (click): login, submit, ls, status, logs, cancel, download, and the ``curve`` group
(zico_cli.curve_commands). Every command takes ``--json`` (machine-readable output on stdout); errors are one line
on stderr with exit status 4 (zico_cli.errors); ``logs -f`` exits with the job's outcome."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from zico_contracts import walltime
from zico_contracts.codearchive import ArchiveError, check_member_path

from . import config
from .api import Api, normalise_url
from .common import connect, json_option, out, parse_env, upload_project
from .curve_commands import curve, store_identity_curve
from .errors import CliError
from .follow import human_bytes, show_logs
from .upload import transfer_progress

UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
         "t": 1 << 40, "tib": 1 << 40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """``"2GiB"``, ``"512M"``, ``"1.5g"``, ``"1000000000"`` -> bytes (K/M/G are binary, KB/MB/GB decimal)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise click.BadParameter(f"{text!r}: expected bytes like 2GiB, 512MiB or 1073741824")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


DURATION_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1h30m"``, ``"1.5h"`` -> seconds (> 0). Raises
    click.BadParameter otherwise."""
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", text)
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s+", "", text) \
            or any(u.lower() not in DURATION_UNITS or (not u and i < len(parts) - 1) for i, (_, u) in enumerate(parts)):
        raise click.BadParameter(f"{text!r}: expected a duration like 90s, 30m, 2h or 1h30m (seconds without a unit)")
    seconds = sum(float(n) * DURATION_UNITS[u.lower()] for n, u in parts)
    if seconds <= 0:
        raise click.BadParameter(f"{text!r}: must be more than 0 seconds")
    return seconds


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Run your own training code on a Zico cluster."""


@cli.command()
@click.argument("url")
@click.option("--token", help="an API token (from your tenant's page); asked for when left out")
@json_option
def login(url, token, as_json):
    """Check an API token against the server at URL and keep both (~/.config/zico/config.json, mode 0600)."""
    url = normalise_url(url)
    if not token:
        token = click.prompt("API token", hide_input=True).strip()
    tenants = Api(url, token).get("/api/tenants/", limit=100)["results"]
    path = config.save(url, token)
    names = ", ".join(f"{t['slug']} ({t['my_role'] or 'staff'})" for t in tenants) or "none"
    out(as_json, {"url": url, "config": str(path), "tenants": tenants},
        f"Signed in to {url}; your tenants: {names}. Saved to {path}.")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--name", default="", help="a name for the job")
@click.option("--tenant", help="tenant slug (needed when you can submit to several)")
@click.option("--budget", help="the most memory the job may hold, e.g. 8GiB")
@click.option("--priority", type=int, default=0, show_default=True, help="-100..100, higher goes first")
@click.option("--time-limit", "time_limit", metavar="DURATION",
              help="the longest the job may run, wall clock, e.g. 90s, 30m, 2h or 1h30m: past it the job is stopped "
                   "and fails; at most your tenant's limit (default: the lesser of your tenant's and the platform's)")
@click.option("--env", "env", multiple=True, metavar="K=V", help="an environment variable for the command")
@click.option("--snapshot", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="a PyTorch memory snapshot of this command's run (torch.cuda.memory._dump_snapshot()): the job, "
                   "and its reruns, are placed with its curve instead of being profiled first")
@json_option
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(name, tenant, budget, priority, time_limit, env, snapshot, as_json, directory, command):
    """Pack DIRECTORY (honouring .gitignore and .zicoignore), upload it and run COMMAND in it as a job.

    Example: zico submit --budget 8GiB . -- python train.py --epochs 3
    """
    variables = parse_env(env)
    budget_bytes = parse_bytes(budget) if budget else None
    try:
        time_limit_s = parse_duration(time_limit) if time_limit else None
    except click.BadParameter as exc:
        exc.param_hint = "'--time-limit'"
        raise
    api = connect()
    archive = upload_project(api, directory, tenant, as_json)
    tenant = tenant or archive["tenant"]
    curve = None
    if snapshot is not None:  # stored for the job's identity before the job exists, so it is never profiled
        curve = store_identity_curve(api, archive, list(command), variables, snapshot, tenant, None, as_json)
        if budget_bytes is not None and curve["peak_bytes"] > budget_bytes:
            raise CliError(f"the snapshot's peak of {curve['peak_bytes']} bytes exceeds --budget {budget_bytes}: the "
                           "job could never run; not submitted (the curve is kept for this command, curve "
                           f"{curve['id']})")
    body = {"code": archive["id"], "command": list(command), "env": variables, "name": name,
            "priority": priority, "budget_bytes": budget_bytes, "tenant": tenant}
    if time_limit_s is not None:
        body["time_limit_s"] = time_limit_s
    job = api.post("/api/jobs/", body)
    url = f"{api.url}/jobs/{job['id']}/"
    with_curve = f"\nIts memory curve is the snapshot's (peak {human_bytes(curve['peak_bytes'])}): it is placed " \
                 "without being profiled." if curve else ""
    out(as_json, {"job": job, "archive": archive, "url": url, **({"curve": curve} if curve else {})},
        f"Job {job['id']} submitted ({job['status']}): {url}{with_curve}\nFollow it with: zico logs -f {job['id']}")


@cli.command(name="ls")
@click.option("--status", help="only jobs in this status")
@click.option("--tenant", help="only this tenant's jobs")
@click.option("--limit", type=click.IntRange(1, 1000), default=25, show_default=True)
@json_option
def list_jobs(status, tenant, limit, as_json):
    """List your tenants' jobs, newest first."""
    jobs = connect().get("/api/jobs/", status=status, tenant=tenant, limit=limit)["results"]
    if as_json:
        return out(True, jobs, "")
    table = Table(box=None, header_style="bold")
    for col in ("ID", "NAME", "STATUS", "WHAT", "TENANT", "PROGRESS", "CREATED"):
        table.add_column(col)
    for j in jobs:
        what = j["workload"] or " ".join(j["command"])
        done = f"{j['progress_iteration']}/{j['total_iterations']}" if j["total_iterations"] else \
            str(j["progress_iteration"])
        table.add_row(str(j["id"]), j["name"] or "—", j["status"], what[:40], j["tenant"], done,
                      j["created_at"][:19].replace("T", " "))
    Console(width=max(shutil.get_terminal_size().columns, 100)).print(table)


def environment_text(env: dict) -> str:
    """``preparing: <the installer's last line>``, or ``3f2a9c1b7d4e (built in 1.2 s)`` and the packages one a line."""
    if env.get("state") != "ready":
        return f"{env.get('state', '?')}: {env.get('progress', '')}".rstrip(": ")
    how = "reused" if env.get("cached") else f"built in {float(env.get('build_s') or 0):.1f} s"
    packages = env.get("packages") or ["(nothing beyond the worker's packages)"]
    return "\n".join([f"{str(env.get('key', ''))[:12]} ({how})", *packages])


def _job_text(j: dict) -> str:
    rows = [("job", f"{j['id']} {j['name']}".strip()), ("status", j["status"]), ("tenant", j["tenant"]),
            ("owner", j["owner"] or "—"), ("runs", j["workload"] or " ".join(j["command"])),
            ("progress", f"{j['progress_iteration']}/{j['total_iterations'] or '?'} iterations"),
            ("budget", human_bytes(j["budget_bytes"]) if j["budget_bytes"] else "none"),
            ("priority", str(j["priority"])), ("created", j["created_at"])]
    if j.get("time_limit_s"):  # its wall-clock limit as resolved at submission
        source = j.get("time_limit_source")
        rows.insert(-2, ("time limit", walltime.format_duration(j["time_limit_s"])
                         + (f" ({walltime.SOURCES[source]})" if source in walltime.SOURCES else "")))
    if j["waiting_reason"]:
        rows.append(("waiting", j["waiting_reason"]))
    if j["failure_reason"]:
        rows.append(("failure", j["failure_reason"]))
    env = j["metrics"].get("environment")
    if isinstance(env, dict):  # the job's own packages (its project's requirements), built on the worker
        rows.append(("environment", environment_text(env)))
    for k in ("iterations_per_s", "peak_allocated_bytes", "slowdown"):
        if j["metrics"].get(k) is not None:
            v = j["metrics"][k]
            rows.append((k, human_bytes(v) if k.endswith("bytes") else f"{v:.3g}"))
    # a multi-line value (a failure's headline, how it ended, its last stderr lines) stays in its column
    return "\n".join(f"{k:>17}  " + str(v).replace("\n", "\n" + " " * 19) for k, v in rows)


@cli.command()
@click.argument("job", type=int)
@json_option
def status(job, as_json):
    """Show one job: status, progress, budget, why it waits or failed."""
    j = connect().get(f"/api/jobs/{job}/")
    out(as_json, j, _job_text(j))


@cli.command()
@click.argument("job", type=int)
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends; exit with its status")
@json_option
def logs(job, follow, as_json):
    """Print a job's output; with -f follow it, with its progress, until it ends (exit 0 succeeded, 1 failed,
    3 cancelled)."""
    sys.exit(show_logs(connect(), job, follow, as_json))


@cli.command()
@click.argument("job", type=int)
@json_option
def cancel(job, as_json):
    """Cancel a job (its owner, a tenant admin or staff)."""
    j = connect().post(f"/api/jobs/{job}/cancel/", ok=(200,))
    out(as_json, j, f"Job {job} cancelled.")


@cli.command()
@click.argument("job", type=int)
@click.argument("path", required=False)
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="directory to write into (default: ./job-<JOB>)")
@json_option
def download(job, path, output, as_json):
    """Download a job's output files (or only PATH, a file or a directory of them)."""
    api = connect()
    files = api.get(f"/api/jobs/{job}/files/")
    if path:
        prefix = path.strip("/")
        files = [f for f in files if f["path"] == prefix or f["path"].startswith(prefix + "/")]
        if not files:
            raise CliError(f"job {job} has no output file {path!r}")
    output = output or Path(f"job-{job}")
    targets = []
    for f in files:
        try:
            rel = check_member_path(f["path"])
        except ArchiveError as exc:
            raise CliError(f"refusing the server's path {f['path']!r}: {exc.problem}") from None
        targets.append((f, output.joinpath(*rel.split("/"))))
    written = []
    with transfer_progress("downloading", not as_json) as progress:
        task = progress.add_task("download", total=sum(f["size_bytes"] for f in files))
        for f, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")  # renamed once whole: no half-written file
            try:
                with api.request("GET", f["url"], stream=True) as r, open(partial, "wb") as fh:
                    for chunk in r.iter_content(1 << 16):
                        fh.write(chunk)
                        progress.advance(task, len(chunk))
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
            written.append({"path": f["path"], "file": str(target), "size_bytes": f["size_bytes"]})
    out(as_json, written, "\n".join(f"{w['file']}  {human_bytes(w['size_bytes'])}" for w in written)
        or f"Job {job} has no output files.")
    metrics = api.get(f"/api/jobs/{job}/").get("metrics") or {}
    if not path and metrics.get("output_skipped_count"):  # the worker could not keep them all (its limits)
        n = metrics["output_skipped_count"]
        click.echo(f"warning: {n} output file{'s' if n != 1 else ''} of job {job} {'were' if n != 1 else 'was'} "
                   "not kept:", err=True)
        for why in metrics.get("output_skipped") or []:
            click.echo(f"  {why}", err=True)


cli.add_command(curve)


def main():  # the console script's entry point
    cli()
