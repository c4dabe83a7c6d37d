"""``zico curve``: show a job's memory curve, attach a PyTorch memory snapshot (to a job, or to a project's command
before any job runs it), and a catalog workload's CPU estimate, over the REST API (docs/cli.md).

Note [Where the estimate runs]
    ``zico curve estimate`` asks the server (``POST /api/workloads/{key}/estimate/``) rather than estimating on
    this machine. The scheduler judges jobs by the estimate in the server's own cache, made with the server's
    torch, transformers and catalog (plugins included), so that is the figure worth showing, and this machine
    needs neither torch nor the workload code. The server never runs one inside a request: a missing estimate is
    computed by its scheduler in the background (seconds to a minute of CPU), and this command asks again every
    ``POLL_S`` until it is stored or ``--wait`` runs out. Only catalog workloads have an estimate (fake tensors run
    the catalog's own training step); a user's own script cannot be estimated without running it: attach a
    snapshot of a run of it (``zico curve import``), or let the platform profile its first iterations.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.console import Console

from .common import connect, json_option, out, parse_env, upload_project
from .curveview import curve_text
from .errors import CliError
from .follow import human_bytes
from .upload import upload_snapshot

POLL_S = 2.0


@click.group()
def curve():
    """Memory curves: show a job's, attach a PyTorch snapshot, estimate a catalog workload's."""


@curve.command("show", short_help="Show a job's memory curve.")
@click.argument("job", type=int)
@click.option("--table", type=click.IntRange(0, 1000), default=0, metavar="N",
              help="also print the iteration as N rows (the most bytes held in each)")
@json_option
def show(job, table, as_json):
    """Show JOB's memory curve: source, peak, persistent bytes, iteration time and a sparkline of one iteration."""
    p = connect().get(f"/api/jobs/{job}/profile/")
    title = f"Job {job}: memory curve {p['id']}, stored {p['created_at'][:19].replace('T', ' ')}"
    out(as_json, p, curve_text(p["curve"], title, table))


def store_identity_curve(api, archive: dict, command: list[str], env: dict[str, str], snapshot: Path,
                         tenant: str | None, device: int | None, as_json: bool) -> dict:
    """Upload ``snapshot`` as the curve of the jobs that run ``command`` with ``env`` in ``archive`` (POST /api/curves/):
    the stored curve's JSON."""
    fields = {"code": str(archive["id"]), "command": json.dumps(command), "env": json.dumps(env),
              **({"tenant": tenant} if tenant else {}), **({"device": str(device)} if device is not None else {})}
    return upload_snapshot(api, "/api/curves/", snapshot, fields, show_progress=not as_json)


def _snapshot_path(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise click.BadParameter(f"{text!r}: no such file", param_hint="SNAPSHOT")
    return path


@curve.command("import", context_settings={"ignore_unknown_options": True},
               short_help="Attach a PyTorch snapshot as a job's (or a command's) curve.")
@click.option("--for", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
              help="the project whose command (after --) the snapshot is of; no job needed")
@click.option("--tenant", help="tenant slug (with --for, when you can submit to several)")
@click.option("--env", "env", multiple=True, metavar="K=V", help="with --for: the command's environment variables")
@click.option("--device", type=click.IntRange(0, 65535), help="index into the snapshot's device traces (default: "
                                                              "the device with the most events)")
@json_option
@click.argument("args", nargs=-1, required=True, type=click.UNPROCESSED)
def import_(directory, tenant, env, device, as_json, args):
    """Attach a PyTorch memory snapshot (a torch.cuda.memory._dump_snapshot() pickle) as a memory curve.

    \b
    zico curve import JOB SNAPSHOT
        to a queued job (it is then placed without being profiled) or an ended one (for its reruns)
    zico curve import --for DIR [--env K=V] SNAPSHOT -- CMD ...
        to CMD in project DIR before any job runs it: `zico submit DIR -- CMD` with the same env then takes it

    Only the tenant's own jobs use a snapshot's curve.
    """
    api = connect()
    if directory is None:
        if len(args) != 2 or not args[0].isdigit():
            raise click.UsageError("expected JOB SNAPSHOT, or --for DIR SNAPSHOT -- CMD ...")
        if env or tenant:
            raise click.UsageError("--env and --tenant go with --for (a job has its own)")
        job, snapshot = int(args[0]), _snapshot_path(args[1])
        fields = {"device": str(device)} if device is not None else {}
        p = upload_snapshot(api, f"/api/jobs/{job}/profile/", snapshot, fields, show_progress=not as_json)
        text = f"Job {job} takes the snapshot's curve (peak {human_bytes(p['peak_bytes'])}): see `zico curve show {job}`."
        return out(as_json, p, text)
    if len(args) < 2:
        raise click.UsageError("expected --for DIR SNAPSHOT -- CMD ...")
    snapshot, command, variables = _snapshot_path(args[0]), list(args[1:]), parse_env(env)
    archive = upload_project(api, directory, tenant, as_json)
    p = store_identity_curve(api, archive, command, variables, snapshot, tenant or archive["tenant"], device,
                             as_json)
    out(as_json, p, f"Curve {p['id']} stored for `{' '.join(command)}` in {p['tenant']} (peak "
                    f"{human_bytes(p['peak_bytes'])}): `zico submit {directory} -- {' '.join(command)}`"
                    f"{' with the same --env' if variables else ''} is placed without being profiled.")


def parse_params(pairs: tuple[str, ...], as_json: str | None) -> dict:
    """``key=value`` pairs (values read as JSON when they parse, else as strings) over a JSON object, as
    ``manage.py curve estimate`` reads them."""
    params: dict = {}
    if as_json:
        try:
            params = json.loads(as_json)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON ({exc.msg})", param_hint="--params-json") from None
        if not isinstance(params, dict):
            raise click.BadParameter("expected a JSON object", param_hint="--params-json")
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--param")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


@curve.command("estimate", short_help="The server's CPU estimate of a catalog workload's curve.")
@click.argument("workload")
@click.option("-p", "--param", "pairs", multiple=True, metavar="KEY=VALUE",
              help="a workload parameter (repeatable); values are read as JSON")
@click.option("--params-json", help="all params as one JSON object")
@click.option("--wait", type=click.FloatRange(0), default=300.0, show_default=True, metavar="SECONDS",
              help="how long to wait for the server to compute a missing estimate (0: ask once)")
@click.option("--table", type=click.IntRange(0, 1000), default=0, metavar="N",
              help="also print the iteration as N rows")
@json_option
def estimate(workload, pairs, params_json, wait, table, as_json):
    """The server's CPU estimate (fake tensors) of a catalog WORKLOAD's memory curve for a CUDA device, as its
    scheduler judges jobs by; computed in the background by the server when it has none yet.

    Catalog workloads only (the server's /api/workloads/ lists them): your own script cannot be estimated without
    running it. Attach a snapshot of a run of it (`zico curve import`), or let the platform profile its first
    iterations.
    """
    api = connect()
    body = {"params": parse_params(pairs, params_json)}
    url = f"/api/workloads/{workload}/estimate/"
    answer = api.request("POST", url, json=body, ok=(200, 202)).json()
    deadline = time.monotonic() + wait
    status = Console(stderr=True).status(f"the server is estimating {workload}", spinner="dots") \
        if not as_json and wait > 0 and answer["status"] == "pending" else None
    if status is not None:
        status.start()
    try:
        while answer["status"] == "pending" and time.monotonic() < deadline:
            time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))
            answer = api.request("POST", url, json=body, ok=(200, 202)).json()
            if status is not None and answer.get("requested_at"):
                status.update(f"the server is estimating {workload} (asked "
                              f"{max(time.time() - answer['requested_at'], 0):.0f} s ago)")
    finally:
        if status is not None:
            status.stop()
    if answer["status"] == "failed":
        raise CliError(f"the server's estimate of {workload} failed: {answer['error']}")
    if answer["status"] == "pending":
        if wait > 0:
            raise CliError(f"no estimate of {workload} yet after {wait:g} s: the server's scheduler computes it in the "
                           "background (with ZICO_SCHEDULER_ESTIMATES on); ask again later")
        return out(as_json, answer, f"Asked the server for the estimate of {workload}; not stored yet (ask again).")
    params = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(answer["params"].items()))
    out(as_json, answer, curve_text(answer["curve"], f"{workload} on {answer['device']}, estimated: {params}", table))
