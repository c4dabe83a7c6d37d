"""The estimate cache: a hit is exactly the computed curve, needs no torch, and any changed input misses."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from zico_workloads.curves import estimate_cache
from zico_workloads.curves.estimate import estimate_curve
from zico_workloads.curves.estimate_cache import cache_inputs, cached_estimate, entry_path

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"batch_size": 8}
ITER = {"warmup": 1, "steady": 2, "timing": "measured"}


def entries(cache_dir):
    return sorted(cache_dir.glob("*.json")) if cache_dir.exists() else []


def assert_same_curve(a, b):
    assert np.array_equal(a.fractions, b.fractions) and np.array_equal(a.bytes, b.bytes)
    assert a.peak_bytes == b.peak_bytes and a.persistent_bytes == b.persistent_bytes
    assert a.iteration_s == b.iteration_s and a.device == b.device and a.source == b.source


def test_a_hit_returns_exactly_what_a_fresh_estimate_computes(tmp_path):
    cache = tmp_path / "cache"
    first = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    assert "cache" not in first.meta and len(entries(cache)) == 1
    hit = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    assert hit.meta["cache"].startswith("hit ")
    fresh = estimate_curve("digits-cnn", PARAMS, "cuda:0", tmp_path)  # a run of its own, no cache
    assert_same_curve(hit, first)
    assert_same_curve(hit, fresh)
    assert {k: v for k, v in hit.meta.items() if k != "cache"} == first.meta


def test_a_hit_imports_neither_torch_nor_transformers(tmp_path):
    cache = tmp_path / "cache"
    expected = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    code = ("import sys, json\n"
            "from zico_workloads.curves.estimate_cache import cached_estimate\n"
            f"c = cached_estimate('digits-cnn', {PARAMS!r}, 'cuda:0', {str(tmp_path)!r}, {str(cache)!r},"
            " warmup=1, steady=2, timing='measured')\n"
            "print(json.dumps([c.peak_bytes, c.persistent_bytes, c.meta['cache'][:3],"
            " sorted(m for m in ('torch', 'transformers', 'sklearn') if m in sys.modules)]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("platform", "."))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    peak, persistent, cache_word, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert (peak, persistent, cache_word, heavy) == (expected.peak_bytes, expected.persistent_bytes, "hit", [])


def test_changed_params_or_iterations_miss_and_cpu_targets_are_not_cached(tmp_path):
    cache = tmp_path / "cache"
    base = cache_inputs("digits-cnn", PARAMS, "cuda:0", tmp_path, **ITER)
    others = [cache_inputs("digits-cnn", {"batch_size": 9}, "cuda:0", tmp_path, **ITER),
              cache_inputs("digits-cnn", PARAMS, "cuda:1", tmp_path, **ITER),
              cache_inputs("digits-cnn", PARAMS, "cuda:0", tmp_path, **{**ITER, "steady": 3}),
              cache_inputs("tiny-lm", None, "cuda:0", tmp_path, **ITER)]
    assert len({entry_path(cache, i) for i in [base, *others]}) == 5
    # defaults filled in: leaving a parameter out or giving its default is the same entry
    assert entry_path(cache, base) == entry_path(cache, cache_inputs("digits-cnn", {**PARAMS, "seed": 0}, "cuda:0",
                                                                     tmp_path, **ITER))
    cached_estimate("digits-cnn", PARAMS, "cpu", tmp_path, cache, **{**ITER, "timing": "roofline"})
    assert entries(cache) == []


def test_a_changed_source_file_or_corpus_misses(tmp_path, monkeypatch):
    src = tmp_path / "recorder.py"
    src.write_text("A = 1\n")
    monkeypatch.setattr(estimate_cache, "_source_files", lambda: [src])
    before = cache_inputs("tiny-lm", None, "cuda:0", tmp_path, **ITER)
    src.write_text("A = 2\n")
    after_code = cache_inputs("tiny-lm", None, "cuda:0", tmp_path, **ITER)
    assert before["corpus"] == "missing" and entry_path(tmp_path, before) != entry_path(tmp_path, after_code)
    corpus = tmp_path / before["params"]["corpus"]
    corpus.parent.mkdir(parents=True)
    corpus.write_bytes(b"x" * 4096)
    after_corpus = cache_inputs("tiny-lm", None, "cuda:0", tmp_path, **ITER)
    assert after_corpus["corpus"][0] == 4096 and entry_path(tmp_path, after_corpus) != entry_path(tmp_path, after_code)


def test_a_corrupt_entry_is_recomputed_and_replaced(tmp_path):
    cache = tmp_path / "cache"
    good = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    [path] = entries(cache)
    path.write_text('{"inputs": ')
    again = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    assert "cache" not in again.meta  # recomputed, not read
    assert_same_curve(again, good)
    assert json.loads(path.read_text())["curve"]["bytes"] == good.bytes.tolist()


def test_refresh_recomputes_on_a_hit(tmp_path):
    cache = tmp_path / "cache"
    cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER)
    again = cached_estimate("digits-cnn", PARAMS, "cuda:0", tmp_path, cache, **ITER, refresh=True)
    assert "cache" not in again.meta and len(entries(cache)) == 1
