"""``python -m workers.curves profile``: a workload's memory curve from a real short run through the Zico allocator.

    python -m workers.curves profile digits-cnn --params-json '{"batch_size": 32}' --device cpu --data-dir var/data

Only a device-worker install can run it (torch, the allocator binding); ``manage.py curve profile`` runs it as a
child process, so the web side never imports the worker's code. Prints the curve (placement.curves JSON) on
stdout; on failure prints one line naming the problem on stderr and exits with status 1 (bad input: 2).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m workers.curves", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    sub = p.add_subparsers(dest="action", required=True)
    q = sub.add_parser("profile", help="real short run on this machine through the Zico allocator", allow_abbrev=False)
    q.add_argument("workload", help="catalog key, e.g. digits-cnn")
    q.add_argument("--params-json", default="{}", help="the workload's params as one JSON object")
    q.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    q.add_argument("--data-dir", type=Path, required=True, help="where the workload reads its data")
    q.add_argument("--warmup", type=int, default=1, help="iterations skipped (default 1)")
    q.add_argument("--steady", type=int, default=3, help="iterations averaged (default 3)")
    return p.parse_args(argv)


def profile(args: argparse.Namespace):
    """The curve of ``args`` (a MemoryCurve). Raises SystemExit(1) with the reason for a run that cannot happen."""
    import torch
    import zico_allocator as za

    from .capture import profile_curve

    params = json.loads(args.params_json)
    try:
        return profile_curve(args.workload, params, args.device, args.data_dir, warmup=args.warmup, steady=args.steady)
    except torch.OutOfMemoryError as exc:
        raise SystemExit(f"profile {args.workload} on {args.device}: out of memory: {str(exc).splitlines()[0]}")
    except za.ZicoError as exc:
        raise SystemExit(f"profile on {args.device}: the Zico allocator cannot run there: {exc}")
    except RuntimeError as exc:  # e.g. torch: no CUDA device or driver
        raise SystemExit(f"profile on {args.device}: {str(exc).splitlines()[0]}")


def main(argv: list[str] | None = None) -> None:
    from placement.curves import CurveError
    from zico_workloads.catalog import ParamsError, UnknownWorkload

    args = parse_args(argv)
    try:
        curve = profile(args)
    except (UnknownWorkload, ParamsError, CurveError, ValueError) as exc:
        sys.stderr.write(f"{exc}\n")
        raise SystemExit(2) from None
    sys.stdout.write(curve.to_json())


if __name__ == "__main__":
    main(sys.argv[1:])
