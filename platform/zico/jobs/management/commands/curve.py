"""``manage.py curve``: inspect a workload's memory curve before submitting it.

    manage.py curve list                                   # catalog workloads and their defaults
    manage.py curve estimate gpt2-small -p batch_size=8 -p seq_len=1024 --device cuda:0 --json out.json
    manage.py curve profile digits-cnn                     # real short run through the Zico allocator
                                                           # (python -m workers.curves profile, a child process)
    manage.py curve import snapshot.pickle --json out.json --points 512
    manage.py curve show out.json

Every subcommand prints the curve's summary (peak, persistent and transient bytes, iteration or
trace duration, phase fractions) and can write the curve as DESIGN-contract JSON (``--json PATH``,
``-`` for stdout), optionally resampled to ``--points N`` steps (bin maxima, so no peak is lost).
A CUDA target's estimate is cached under ``ZICO_ESTIMATE_CACHE_DIR`` (default ``<ZICO_VAR_DIR>/cache/estimates``;
keyed on everything it depends on: ``zico_workloads.curves.estimate_cache``); ``--no-cache`` recomputes it. The
submission check reads these entries (zico.jobs.known), so a job whose estimate fits no device is refused.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from zico_workloads.curves.trace import MAX_ITERATIONS

MAX_POINTS = 100_000  # more points than any scheduler or chart uses; bounds --points' memory


def _mib(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB ({int(b):,} bytes)"


def parse_params(pairs: list[str], as_json: str | None) -> dict[str, Any]:
    """``key=value`` pairs (values read as JSON when they parse, else as strings) over a JSON object."""
    params: dict[str, Any] = {}
    if as_json:
        try:
            params = json.loads(as_json)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--params-json: not valid JSON ({exc.msg})") from exc
        if not isinstance(params, dict):
            raise CommandError("--params-json: expected a JSON object")
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--param {pair!r}: expected key=value")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def run_without_apps(argv: list[str]) -> None:
    """``manage.py curve ...`` (``argv`` as ``sys.argv``) without ``django.setup()``, and end the process.

    The command reads settings only: no model, no database, no URL, no other app. ``django.setup()``
    imports every installed app's models, admin and signal modules and the PostgreSQL driver, 0.25 s
    of CPU on 2 loaded cores, paid by every estimate and every cache hit (docs/curves.md "How fast").
    Logging is configured from ``settings.LOGGING`` (the project's handlers, which this command's
    messages go to) without Django's defaults underneath: their admin-mail handler imports Django's
    debug views, HTTP and ORM modules (0.1-0.4 s) for requests this command never serves.
    """
    import gc
    import logging.config

    # The process ends when the command does (Command.run_from_argv): no collection is worth its CPU
    # (Note [No garbage collection in the estimate]).
    gc.disable()
    logging.config.dictConfig(settings.LOGGING)
    Command().run_from_argv(argv)


class Command(BaseCommand):
    help = "Estimate, profile, import (PyTorch snapshot) or show a memory curve; print its summary."
    # No system checks: this command reads no database and serves no URL, and the checks import the
    # URLconf and with it every view, DRF and drf-spectacular (docs/benchmarks.md, "Measurements behind
    # the notes"); ``manage.py check`` runs them.
    requires_system_checks: list[str] = []

    def run_from_argv(self, argv: list[str]) -> None:
        """Run the command from the command line, then end the process without the interpreter's
        teardown: freeing the module graphs of torch, ``torch._dynamo`` and transformers is a large part
        of a cold estimate's wall time (docs/benchmarks.md, "Measurements behind the notes"). Output
        streams and logging handlers are flushed first, and the exit status is the one Django would
        give (0, or the CommandError's). ``call_command`` does not come through here: a test process
        that calls the command keeps running."""
        code: int | str | None = 0
        try:
            super().run_from_argv(argv)
        except SystemExit as exc:
            code = exc.code
        if isinstance(code, str):  # as the interpreter treats SystemExit("message")
            sys.stderr.write(code + "\n")
            code = 1
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        logging.shutdown()
        os._exit(code or 0)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="{list,estimate,profile,import,show}")
        # allow_abbrev=False: "--device" must not be taken for "--device-index" (import) or any other option
        sub.add_parser("list", help="catalog workloads and their default params", allow_abbrev=False)
        for name, text in (("estimate", "CPU estimate with fake tensors (no GPU, no real memory)"),
                           ("profile", "real short run on this machine through the Zico allocator")):
            p = sub.add_parser(name, help=text, allow_abbrev=False)
            p.add_argument("workload", help="catalog key, e.g. gpt2-small")
            p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                           help="a workload parameter (repeatable); values are read as JSON")
            p.add_argument("--params-json", default=None, help="all params as one JSON object")
            p.add_argument("--device", default="cpu", help="target device: cpu or cuda[:N] (default cpu)")
            p.add_argument("--warmup", type=int, default=1,
                           help=f"iterations skipped (default 1, 0..{MAX_ITERATIONS})")
            p.add_argument("--steady", type=int, default=None,
                           help=f"iterations averaged (1..{MAX_ITERATIONS}; default 2 for estimate, 3 for profile)")
            if name == "estimate":
                p.add_argument("--timing", choices=("measured", "roofline"), default="measured",
                               help="a CPU target's clock: each operator timed here (default; follows the "
                                    "machine's load while measuring) or a roofline of a few measured rates")
                p.add_argument("--no-cache", action="store_true",
                               help="compute afresh even if this CUDA-target estimate is cached (the new "
                                    "result replaces the cached one); CPU targets are never cached")
            self._output_args(p)
        p = sub.add_parser("import", help="a torch.cuda.memory._dump_snapshot pickle", allow_abbrev=False)
        p.add_argument("snapshot", type=Path)
        p.add_argument("--device-index", type=int, default=None, help="trace of this device (default: busiest)")
        self._output_args(p)
        p = sub.add_parser("show", help="a curve JSON file", allow_abbrev=False)
        p.add_argument("curve", type=Path)
        self._output_args(p)

    @staticmethod
    def _output_args(p: CommandParser) -> None:
        p.add_argument("--json", dest="json_out", default=None, metavar="PATH", help="write the curve ('-': stdout)")
        p.add_argument("--points", type=int, default=None,
                       help=f"resample to N points (1..{MAX_POINTS:,}; bin maxima) for the summary and the JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        from placement.curves import CurveError

        from zico_workloads.catalog import ParamsError, UnknownWorkload

        action = opts["action"]
        if action == "list":
            return self._list()
        self._check_args(opts)  # before any import or run: bad arguments fail fast
        try:
            curve = getattr(self, f"_{action}")(opts)
        except (UnknownWorkload, ParamsError, CurveError) as exc:
            raise CommandError(str(exc)) from exc
        except ValueError as exc:  # SnapshotError and other bad input
            raise CommandError(str(exc)) from exc
        if opts["points"] is not None:
            from placement.curves import resampled_curve

            curve = resampled_curve(curve, opts["points"])
        # With the JSON on stdout the summary goes to stderr, so that stdout is the JSON alone.
        self._print_summary(curve, self.stderr if opts["json_out"] == "-" else self.stdout)
        self._write(curve, opts["json_out"])

    @staticmethod
    def _check_args(opts: dict[str, Any]) -> None:
        """Raise CommandError for --points outside 1..MAX_POINTS, --warmup outside 0..MAX_ITERATIONS,
        --steady outside 1..MAX_ITERATIONS, a negative
        --device-index, or a --json path that cannot be written (its folder missing, or the path a folder)."""
        if opts.get("points") is not None and not 1 <= opts["points"] <= MAX_POINTS:
            raise CommandError(f"--points: must lie in 1..{MAX_POINTS}, got {opts['points']}")
        if opts.get("warmup") is not None and not 0 <= opts["warmup"] <= MAX_ITERATIONS:
            raise CommandError(f"--warmup: must lie in 0..{MAX_ITERATIONS}, got {opts['warmup']}")
        if opts.get("steady") is not None and not 1 <= opts["steady"] <= MAX_ITERATIONS:
            raise CommandError(f"--steady: must lie in 1..{MAX_ITERATIONS}, got {opts['steady']}")
        if opts.get("device_index") is not None and opts["device_index"] < 0:
            raise CommandError(f"--device-index: must be >= 0, got {opts['device_index']}")
        out = opts.get("json_out")
        if out not in (None, "-"):
            target = Path(out)
            if target.is_dir():
                raise CommandError(f"--json {out}: is a directory; give a file path")
            if not target.parent.is_dir():
                raise CommandError(f"--json {out}: no such directory {target.parent}")

    # -- actions --------------------------------------------------------------------------
    def _list(self) -> None:
        from zico_workloads.catalog import list_workloads

        for w in list_workloads():
            defaults = ", ".join(f"{k}={v}" for k, v in w.defaults.items())
            self.stdout.write(f"{w.key:12s} {w.task:21s} {w.title}\n{'':34s}{defaults}")

    def _estimate(self, opts: dict[str, Any]):
        from zico_workloads.curves.estimate_cache import cached_estimate

        params = parse_params(opts["param"], opts["params_json"])
        return cached_estimate(opts["workload"], params, opts["device"], settings.ZICO_DATA_DIR,
                               settings.ZICO_ESTIMATE_CACHE_DIR, warmup=opts["warmup"],
                               steady=2 if opts["steady"] is None else opts["steady"], timing=opts["timing"],
                               refresh=opts["no_cache"])

    def _profile(self, opts: dict[str, Any]):
        """The run is the device worker's code (``python -m workers.curves profile``), in a child process: the web
        side never imports ``workers``. Its one-line error becomes the CommandError."""
        import subprocess
        import sys

        from placement.curves import curve_from_dict

        params = parse_params(opts["param"], opts["params_json"])
        argv = [sys.executable, "-m", "workers.curves", "profile", opts["workload"], "--params-json",
                json.dumps(params), "--device", opts["device"], "--data-dir", str(settings.ZICO_DATA_DIR),
                "--warmup", str(opts["warmup"]), "--steady", str(3 if opts["steady"] is None else opts["steady"])]
        proc = subprocess.run(argv, cwd=settings.BASE_DIR, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines() or [f"exited with status {proc.returncode}"]
            raise CommandError(lines[-1])
        return curve_from_dict(json.loads(proc.stdout))

    def _import(self, opts: dict[str, Any]):
        from zico_workloads.curves.snapshot import snapshot_curve

        return snapshot_curve(opts["snapshot"], device=opts["device_index"], meta={"file": opts["snapshot"].name})

    def _show(self, opts: dict[str, Any]):
        from placement.curves import load_curve

        return load_curve(opts["curve"])

    # -- output ---------------------------------------------------------------------------
    def _print_summary(self, curve, stream) -> None:
        from placement.curves import summary

        s = summary(curve)
        span = "duration" if curve.source == "torch-snapshot" else "iteration"
        lines = [
            f"source      {s['source']} ({s['device']})",
            f"peak        {_mib(s['peak_bytes'])}",
            f"persistent  {_mib(s['persistent_bytes'])}",
            f"transient   {_mib(s['transient_peak_bytes'])}",
            f"{span:11s} {s['iteration_s']:.6f} s",
            f"points      {s['points']}",
        ]
        phases = curve.meta.get("phase_fractions")
        if phases:
            lines.append("phases      " + ", ".join(f"{k} at {v:.3f}" for k, v in phases.items()))
        for key in ("workload", "window", "events", "estimate_s", "profile_s", "iterations_averaged", "cache"):
            if key in curve.meta:
                lines.append(f"{key:11s} {curve.meta[key]}")
        stream.write("\n".join(lines))

    def _write(self, curve, path: str | None) -> None:
        if path is None:
            return
        text = curve.to_json()
        if path == "-":
            self.stdout.write(text)
            return
        try:
            Path(path).write_text(text)
        except OSError as exc:
            raise CommandError(f"--json {path}: cannot write: {exc.strerror or exc}") from exc
        self.stderr.write(f"wrote {path}")
