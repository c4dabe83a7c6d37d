"""On-disk cache of deterministic estimates: a built-in workload's curve for a CUDA target.

Torch-free: a hit reads one JSON file and imports neither torch, transformers nor the workload
code, so ``manage.py curve estimate`` answers a repeated question in well under a second instead
of the seconds the imports and the fake-tensor run take (docs/curves.md, "How fast").

Note [What the estimate cache keys on]
An estimate for a CUDA target is a pure function of its inputs: the fake-tensor run is
deterministic and its clock is the datasheet roofline (``costs.CUDA_COST``), not a measurement.
So an entry is keyed (SHA-256) on all of them: the workload key and its validated params
(defaults filled in), the device string, ``warmup``, ``steady`` and ``timing``; the Python version
and the installed versions of torch, transformers and numpy (the dispatched operators, the model
code, the arithmetic); the bytes of every source file of ``zico_workloads``, ``zico_workloads.curves`` and
``placement.curves`` (the recorder, cost model, catalog, builders, data and trace code); and, for a
text workload on real data, the corpus file's size and modification time (taken again after the
run, which writes the default corpus when it is missing; a run that fails writes no entry). Any
change to any of these is a miss.
Not cached, because their result is not a function of the inputs: a CPU target (its clock is
measured on this machine while it runs) and a workload registered through entry points (its
builder's code lies outside the hashed files). The curve is stored with full-precision floats, so
a hit returns exactly the arrays and figures the run produced; its ``meta`` gains ``"cache"``
naming the entry (``estimate_s`` stays the original run's time).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from placement.curves import CurveError, MemoryCurve
from zico_workloads.catalog import get_workload, validate_params

log = logging.getLogger(__name__)

CACHE_VERSION = 1
_HASHED_PACKAGES = ("zico_workloads", "zico_workloads.curves")
_HASHED_MODULES = ("placement.curves",)
_VERSIONED = ("torch", "transformers", "numpy")


def cacheable(key: str, device: str) -> bool:
    """Whether the estimate of ``key`` on ``device`` is deterministic enough to cache (see Note
    [What the estimate cache keys on]): a CUDA target and a built-in workload."""
    return isinstance(device, str) and device.startswith("cuda") and get_workload(key).builder.startswith(
        "zico_workloads.")


def _source_files() -> list[Path]:
    files: list[Path] = []
    for package in _HASHED_PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in spec.submodule_search_locations or []:
            files.extend(sorted(Path(root).glob("*.py")))
    for module in _HASHED_MODULES:
        files.append(Path(importlib.util.find_spec(module).origin))
    return files


def _code_digest() -> str:
    h = hashlib.sha256()
    for path in _source_files():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _corpus_stamp(params: dict[str, Any], data_dir: str | Path | None) -> list[int] | str | None:
    if params.get("data") != "real" or "corpus" not in params:
        return None
    if data_dir is None:
        return "no data directory"
    try:
        st = (Path(data_dir) / params["corpus"]).stat()
    except OSError:
        return "missing"
    return [st.st_size, st.st_mtime_ns]


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str | None]:
    """Python's and the installed torch, transformers and numpy versions, read once per process: reading a
    package's metadata costs milliseconds (a submission reads the cache, zico.jobs.known), and what a process
    has imported does not change under it."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cache_inputs(key: str, params: dict[str, Any] | None, device: str, data_dir: str | Path | None, *,
                 warmup: int, steady: int, timing: str) -> dict[str, Any]:
    """Everything the entry for these arguments is keyed on, as a JSON-ready dict.

    Raises UnknownWorkload or ParamsError (the catalog's) for a bad key or params."""
    params = validate_params(key, params, data_dir=None)  # as build_parts validates them
    versions = dict(_versions())
    return {"cache_version": CACHE_VERSION, "workload": key, "params": params, "device": device,
            "warmup": warmup, "steady": steady, "timing": timing, "versions": versions,
            "code_sha256": _code_digest(), "corpus": _corpus_stamp(params, data_dir)}


def entry_path(cache_dir: str | Path, inputs: dict[str, Any]) -> Path:
    """The entry file for ``inputs``: ``<cache_dir>/<sha256 of their canonical JSON>.json``."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / f"{digest}.json"


def _load(path: Path, inputs: dict[str, Any]) -> MemoryCurve | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry.get("inputs") != inputs:  # a hash collision or a hand-edited file: not ours
            return None
        c = entry["curve"]
        return MemoryCurve(c["fractions"], c["bytes"], c["iteration_s"], c["persistent_bytes"], c["source"],
                           c["device"], {**c["meta"], "cache": f"hit {path}"})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, CurveError) as exc:  # unreadable or corrupt: recompute
        log.warning("estimate cache %s unreadable (%s); recomputing", path, exc)
        return None


def _store(path: Path, inputs: dict[str, Any], curve: MemoryCurve) -> None:
    """Write the entry atomically (a temporary file renamed over it), so a concurrent reader sees
    the old entry, the new one or none, never half of one. A cache that cannot be written is
    logged and skipped: the estimate itself has succeeded."""
    entry = {"inputs": inputs, "curve": {
        "fractions": curve.fractions.tolist(), "bytes": curve.bytes.tolist(),  # full precision
        "iteration_s": curve.iteration_s, "persistent_bytes": curve.persistent_bytes,
        "source": curve.source, "device": curve.device, "meta": curve.meta}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.warning("estimate cache %s not written: %s", path, exc)


def stored_estimate(key: str, params: dict[str, Any] | None, device: str, data_dir: str | Path | None,
                    cache_dir: str | Path, *, warmup: int = 1, steady: int = 2,
                    timing: str = "measured") -> MemoryCurve | None:
    """The entry :func:`cached_estimate` would return for these arguments if one is stored, else None (also for
    arguments that are not cacheable). Never estimates: torch-free, for callers that must not wait (the web
    side's submission check, zico.jobs.known).

    Raises UnknownWorkload or ParamsError (the catalog's) for a bad key or params."""
    if not cacheable(key, device):
        return None
    inputs = cache_inputs(key, params, device, data_dir, warmup=warmup, steady=steady, timing=timing)
    return _load(entry_path(cache_dir, inputs), inputs)


def cached_estimate(key: str, params: dict[str, Any] | None, device: str, data_dir: str | Path | None,
                    cache_dir: str | Path, *, warmup: int = 1, steady: int = 2, timing: str = "measured",
                    refresh: bool = False) -> MemoryCurve:
    """``estimate.estimate_curve(key, params, device, data_dir, warmup=..., steady=..., timing=...)``,
    read from ``cache_dir`` when an entry for exactly these inputs exists, else computed and stored
    there (Note [What the estimate cache keys on]). ``refresh`` computes and stores even on a hit.
    Arguments that are not cacheable go straight to ``estimate_curve``.

    Raises what ``estimate_curve`` raises (UnknownWorkload, ParamsError, ValueError, CurveError).
    """
    if not cacheable(key, device):
        from zico_workloads.curves.estimate import estimate_curve

        return estimate_curve(key, params, device, data_dir, warmup=warmup, steady=steady, timing=timing)
    inputs = cache_inputs(key, params, device, data_dir, warmup=warmup, steady=steady, timing=timing)
    path = entry_path(cache_dir, inputs)
    if not refresh:
        hit = _load(path, inputs)
        if hit is not None:
            return hit
    from zico_workloads.curves.estimate import estimate_curve

    curve = estimate_curve(key, params, device, data_dir, warmup=warmup, steady=steady, timing=timing)
    # keyed again after the run: it may have created the default corpus (corpus.ensure_corpus)
    inputs = cache_inputs(key, params, device, data_dir, warmup=warmup, steady=steady, timing=timing)
    _store(entry_path(cache_dir, inputs), inputs, curve)
    return curve
