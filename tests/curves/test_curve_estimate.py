"""Fake-tensor estimate tests: no real memory, exact persistent bytes, agreement with a real allocator
trace on the small workloads, CUDA targets, corrections, the collector paused over the run."""
import contextlib
import gc
import resource

import numpy as np
import pytest
import torch

from zico_workloads.curves import estimate as estimate_module
from zico_workloads.curves.estimate import Correction, estimate_curve, round_up
from zico_workloads import data
from zico_workloads.models import DigitsCNN


def param_bytes(model, copies):
    """Bytes of parameters (and as many optimizer-state copies), each rounded to 512-byte blocks."""
    return copies * sum(round_up(p.numel() * p.element_size(), 512) for p in model.parameters())


def test_digits_estimate_holds_parameters_and_momentum_between_iterations(tmp_path):
    curve = estimate_curve("digits-cnn", {}, "cpu", tmp_path)
    assert curve.source == "estimate" and curve.device == "cpu"
    assert curve.persistent_bytes == param_bytes(DigitsCNN(16), copies=2)  # weights + SGD momentum
    assert curve.peak_bytes > 10 * curve.persistent_bytes
    phases = curve.meta["phase_fractions"]
    assert 0 == phases["forward"] < phases["backward"] < phases["optimizer"] < 1
    assert curve.meta["iterations_averaged"] == 2


def test_the_estimate_allocates_no_real_memory_for_a_huge_batch(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    curve = estimate_curve("tiny-lm", {"batch_size": 256, "seq_len": 1024, "data": "synthetic"}, "cpu", tmp_path,
                           steady=1)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert curve.peak_bytes > 8 * 2**30
    assert grown < 1 * 2**30


def test_cached_datasets_stay_real_tensors_after_an_estimate(tmp_path):
    estimate_curve("digits-cnn", {"batch_size": 8}, "cpu", tmp_path, steady=1)
    images, labels = data.digits_images()
    assert type(images) is torch.Tensor and float(images.abs().sum()) > 0


def test_a_cuda_target_is_labelled_and_uses_the_cuda_cost_model(tmp_path):
    curve = estimate_curve("tiny-lm", {"batch_size": 2, "seq_len": 32}, "cuda:1", tmp_path, steady=1)
    assert curve.device == "cuda:1" and curve.meta["cost_model"].startswith("cuda")
    with pytest.raises(ValueError, match="device"):
        estimate_curve("tiny-lm", {}, "tpu", tmp_path)


def test_a_correction_scales_and_offsets_the_estimate(tmp_path):
    plain = estimate_curve("digits-cnn", {"batch_size": 8}, "cpu", tmp_path, steady=1)
    fixed = Correction(scale=1.1, offset_bytes=1000).apply(plain)
    assert fixed.peak_bytes == pytest.approx(plain.peak_bytes * 1.1 + 1000)
    assert fixed.persistent_bytes == pytest.approx(plain.persistent_bytes * 1.1 + 1000)
    assert fixed.meta["correction"] == {"scale": 1.1, "offset_bytes": 1000}


def test_a_workloads_registered_correction_applies_to_its_device_type(tmp_path, monkeypatch):
    from dataclasses import replace

    from zico_workloads import catalog

    plain = estimate_curve("digits-cnn", {"batch_size": 8}, "cpu", tmp_path, steady=1)
    corrected = replace(catalog.get_workload("digits-cnn"),
                        estimate_corrections={"cpu": {"scale": 1.0, "offset_bytes": 4096.0}})
    builtins = tuple(corrected if w.key == "digits-cnn" else w for w in catalog._BUILTIN)
    monkeypatch.setattr(catalog, "_BUILTIN", builtins)
    again = estimate_curve("digits-cnn", {"batch_size": 8}, "cpu", tmp_path, steady=1)
    assert again.peak_bytes == plain.peak_bytes + 4096
    assert estimate_curve("digits-cnn", {"batch_size": 8}, "cuda", tmp_path, steady=1).meta.get("correction") is None


def test_a_cuda_target_does_not_store_attention_scores_as_the_cpu_math_kernel_does(tmp_path):
    params = {"batch_size": 4, "seq_len": 512, "data": "synthetic"}
    cpu = estimate_curve("tiny-lm", params, "cpu", tmp_path, steady=1)
    cuda = estimate_curve("tiny-lm", params, "cuda:0", tmp_path, steady=1)
    scores = 4 * 4 * 512 * 512 * 4  # batch x heads x seq x seq fp32, one tensor of one layer
    # the CPU path keeps scores, softmax, dropout mask and dropout output for both layers
    cuda_tensors = cuda.peak_bytes - cuda.meta["blas_workspace_bytes"]  # workspaces: see the test below
    assert cpu.peak_bytes - cuda_tensors > 2 * 2 * scores


def test_a_cuda_target_holds_one_cublas_workspace_per_thread_that_runs_matmuls(tmp_path):
    from zico_workloads.curves.costs import HOPPER_BLAS_WORKSPACE_BYTES

    params = {"batch_size": 2, "seq_len": 64, "data": "synthetic"}
    cpu = estimate_curve("tiny-lm", params, "cpu", tmp_path, steady=1)
    cuda = estimate_curve("tiny-lm", params, "cuda:0", tmp_path, steady=1)
    # forward on the job's thread and backward on autograd's: two (handle, stream) pairs, kept for good
    assert cpu.meta["blas_workspace_bytes"] == 0
    assert cuda.meta["blas_workspace_bytes"] == 2 * HOPPER_BLAS_WORKSPACE_BYTES
    assert cuda.persistent_bytes - cpu.persistent_bytes == 2 * HOPPER_BLAS_WORKSPACE_BYTES


@pytest.fixture
def collector_thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_the_estimate_resumes_the_collector_it_paused_and_leaves_a_paused_one_paused(tmp_path):
    assert gc.isenabled()
    estimate_curve("digits-cnn", {"batch_size": 8}, "cuda:0", tmp_path, steady=1)
    assert gc.isenabled()
    gc.disable()
    try:
        estimate_curve("digits-cnn", {"batch_size": 8}, "cuda:0", tmp_path, steady=1)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("key, params", [("tiny-lm", {"batch_size": 2, "seq_len": 32}),
                                         ("resnet18", {"batch_size": 2, "image_size": 32})])
def test_pausing_the_collector_changes_no_figure_of_the_estimate(tmp_path, monkeypatch, collector_thresholds, key,
                                                                 params):
    """Note [No garbage collection in the estimate]: the same estimate with the collector running all
    through the fake run, full collections every few dozen allocations, is identical bit for bit."""
    paused = estimate_curve(key, params, "cuda:0", tmp_path)
    gc.set_threshold(50, 1, 1)
    monkeypatch.setattr(estimate_module, "_collector_paused", contextlib.nullcontext)
    collecting = estimate_curve(key, params, "cuda:0", tmp_path)
    assert collecting.peak_bytes == paused.peak_bytes and collecting.persistent_bytes == paused.persistent_bytes
    assert np.array_equal(collecting.bytes, paused.bytes) and np.array_equal(collecting.fractions, paused.fractions)
    assert collecting.iteration_s == paused.iteration_s
