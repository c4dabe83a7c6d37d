"""Zico's built-in catalog project: trains one catalog workload (``zico_workloads``) as an ordinary script.

    python train.py --workload digits-cnn --params '{"iterations": 50}' [--checkpoint-every-s 10]
                    [--created-at 2026-01-01T00:00:00+00:00]

A device worker runs a catalog job (a ``workload`` with ``params``) as this script, through the same path as a
user's own code: ``workers.job.entry`` in the job's sandbox (``workers.runner.catalog_script_spec``), so the
iterations are counted from the optimizer's steps and gated there, and the memory is the job process's pool.
The script itself knows nothing of the agent; it uses the optional ``zico`` API (:mod:`zico_job`) to say how
many iterations the run takes and to report its figures (loss, loss average, training accuracy, the iteration
reached, the iteration it resumed from), and keeps its checkpoint in the job's output directory
(``ZICO_OUTPUT_DIR``: the worker mounts the job's checkpoint directory there, so a requeued job resumes). Data
come from ``ZICO_DATA_DIR`` (read-only; the worker writes the built-in corpus there before the job starts).
Outside a job it trains on the CPU (or the one GPU it sees) and writes its checkpoint to the current directory.

Exit status: 0 when trained (or stopped by the agent), 1 with the exception otherwise (a bad workload key or
params is a ``ValueError`` naming the field).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import zico_job as zico  # inside a job, ``import zico`` is this same module (zico_job/shim)

CHECKPOINT_FILE = "checkpoint.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="train.py", description="Train one Zico catalog workload.")
    ap.add_argument("--workload", required=True, help="the catalog key (digits-cnn, tiny-lm, resnet18, ...)")
    ap.add_argument("--params", default="{}", help="the workload's parameters as a JSON object")
    ap.add_argument("--checkpoint-every-s", type=float, default=None,
                    help="seconds between checkpoints (none when absent)")
    ap.add_argument("--created-at", default=None, help="the job's creation time: a checkpoint of another job "
                                                        "with the same id is discarded (workers.checkpoints)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    import torch

    from workers.job import checkpoints
    from zico_workloads.catalog import validate_params
    from zico_workloads.models import preload_data
    from zico_workloads.training import create_training_job

    params = validate_params(a.workload, json.loads(a.params))
    data_dir = zico.data_dir()
    device = "cuda" if torch.cuda.is_available() else "cpu"  # a GPU job's sandbox shows its one GPU
    preload_data(params, data_dir)
    job = create_training_job(a.workload, params, device=device, data_dir=data_dir)
    path = os.path.join(zico.output_dir(), CHECKPOINT_FILE)
    ckpt = checkpoints.load_file(path, zico.job_id() or 0, a.created_at)
    first, prior_s = 0, 0.0
    if ckpt is not None:
        job.load_state_dict(ckpt["state"])
        first, prior_s = job.iterations_done, float(ckpt.get("train_s", 0.0))
    zico.set_iterations_total(job.iterations - first)  # this run's optimizer steps: no gate after the last
    zico.log(resumed_from=first, iterations=job.iterations)
    saves = checkpoints.SaveTally()
    every = a.checkpoint_every_s if a.checkpoint_every_s else float("inf")
    t0 = time.monotonic()
    next_ckpt = t0 + every

    def save(i: int) -> None:
        saves.save_file(path, zico.job_id() or 0, i, job.state_dict(), train_s=prior_s + time.monotonic() - t0,
                        job_created_at=a.created_at)

    try:
        for i in range(first, job.iterations):
            job.run_iteration(i)
            zico.log(iteration=i + 1, **{k: v for k, v in job.metrics().items() if k not in ("iterations_done",
                                                                                            "iterations")})
            if time.monotonic() >= next_ckpt and i + 1 < job.iterations:
                save(i)
                next_ckpt = time.monotonic() + every
    except BaseException as exc:  # a stop (cancel, stale placement, worker shutdown) keeps the work done
        if type(exc).__name__ == "JobStopped" and job.iterations_done > first:
            save(job.iterations_done - 1)
        raise
    finally:
        zico.log(iterations_this_run=job.iterations_done - first, **saves.metrics())


if __name__ == "__main__":
    main()
