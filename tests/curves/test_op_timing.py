"""Measured operator times of the CPU estimate: made-up inputs, one measurement per signature,
the real-memory cap, torch's random state, and the modelled zero_grad."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from zico_workloads.curves.costs import DeviceCost, measured_cpu_cost
from zico_workloads.curves.estimate import estimate_curve
from zico_workloads.curves.op_timing import MeasuredOpCost, _real_like

aten = torch.ops.aten
# A cost model whose roofline cannot be mistaken for a measurement: 1 s of overhead per operator.
SLOW_ROOFLINE = DeviceCost("test", 1e12, 1e12, 1e12, overhead_s=1.0, phase_overhead_s=(("forward", 1.0),),
                           phase_op_s=(("forward", 0.25),))


MODE = FakeTensorMode()  # one mode: fake tensors of different modes do not mix


def fake(shape, dtype=torch.float32):
    with MODE:
        return torch.empty(shape, dtype=dtype)


def test_made_up_inputs_keep_shape_stride_and_dtype_with_safe_values():
    t = fake((4, 6)).t()
    real = _real_like(t)
    assert type(real) is torch.Tensor and real.shape == (6, 4) and real.stride() == (1, 6)
    assert float(real.min()) >= 0.5 and float(real.max()) < 1.5  # no NaN from sqrt/log of a negative
    assert int(_real_like(fake((5,), torch.int64)).abs().sum()) == 0  # zero: a valid index anywhere


def test_each_signature_is_measured_once_and_priced_without_the_roofline():
    cost = MeasuredOpCost(SLOW_ROOFLINE)
    x, y = fake((64, 64)), fake((64, 64))
    with MODE:
        out = x @ y
    first = cost.op_seconds(aten.mm.default, (x, y), {}, out, "forward")
    again = cost.op_seconds(aten.mm.default, (x, y), {}, out, "forward")
    assert cost.measured == 1 and first == again
    # overhead 1 s less the calibration's own 0.25 s per operator, plus a real 64^3 matmul (< 0.5 s)
    assert 0.75 < first < 1.25
    other = fake((32, 64))
    with MODE:
        out2 = other @ y
    cost.op_seconds(aten.mm.default, (other, y), {}, out2, "forward")
    assert cost.measured == 2


def test_a_call_above_the_memory_cap_is_priced_by_the_roofline_and_never_run():
    cost = MeasuredOpCost(SLOW_ROOFLINE, max_bytes=1 << 20)
    big = fake((1 << 20,))  # 4 MiB of input, and the output would be as large again
    with MODE:
        out = big + big
    seconds = cost.op_seconds(aten.add.Tensor, (big, big), {}, out, "forward")
    assert seconds == SLOW_ROOFLINE.op_seconds(aten.add.Tensor, (big, big), {}, out, "forward")
    # an operator with no tensor input but a huge output is refused by its (fake) output's size
    with MODE:
        zeros = torch.zeros(1 << 30)
    assert cost.op_seconds(aten.zeros.default, ([1 << 30],), {"dtype": torch.float32}, zeros, "forward") == \
        SLOW_ROOFLINE.op_seconds(aten.zeros.default, ([1 << 30],), {"dtype": torch.float32}, zeros, "forward")


def test_measuring_a_random_operator_leaves_torchs_random_state_alone():
    cost = MeasuredOpCost(SLOW_ROOFLINE)
    x = fake((1000,))
    state = torch.get_rng_state()
    with MODE:
        out = torch.empty(1000)
    cost.op_seconds(aten.bernoulli_.float, (x, 0.5), {}, out, "forward")
    assert cost.measured == 1 and torch.equal(torch.get_rng_state(), state)


def test_the_cpu_calibration_depends_on_the_optimizer_and_times_zero_grad():
    sgd, adamw = measured_cpu_cost("sgd"), measured_cpu_cost("adamw")
    assert sgd.name.endswith("-sgd") and adamw.name.endswith("-adamw")
    assert sgd.zero_grad_s_per_param > 0 and adamw.zero_grad_s_per_param > 0
    assert {k for k, _ in sgd.phase_overhead_s} == {"forward", "backward", "optimizer"}


def test_the_estimates_zero_grad_frees_gradients_one_parameter_at_a_time(tmp_path):
    base = measured_cpu_cost("sgd")
    params = {"batch_size": 8}
    instant = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1,
                             cost=replace(base, zero_grad_s_per_param=0.0))
    slow = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1,
                          cost=replace(base, zero_grad_s_per_param=0.01))
    # digits-cnn has 6 parameters (two convolutions and a linear layer, weights and biases)
    assert slow.iteration_s - instant.iteration_s == pytest.approx(0.06, abs=1e-6)
    tail = slow.fractions > 1 - 0.06 / slow.iteration_s - 1e-9
    frees = np.diff(slow.bytes[tail]) < 0
    assert frees.sum() >= 6  # one free per gradient, each at its own time
    assert slow.peak_bytes == instant.peak_bytes


def test_dropping_the_autograd_graph_ends_the_estimates_iteration_after_its_modelled_time(tmp_path):
    base = replace(measured_cpu_cost("sgd"), zero_grad_s_per_param=0.0)
    params = {"batch_size": 8}
    instant = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1, cost=replace(base, teardown_s_per_op=0.0))
    slow = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1, cost=replace(base, teardown_s_per_op=0.01))
    forward_ops = slow.meta["forward_ops_per_iteration"]
    assert forward_ops >= 8  # two convolutions, ReLUs, poolings, a linear layer, the loss
    assert slow.iteration_s - instant.iteration_s == pytest.approx(0.01 * forward_ops, abs=1e-6)


def test_metadata_queries_of_fake_tensors_cost_no_time():
    from zico_workloads.curves.estimate import MemoryRecorder

    recorder = MemoryRecorder(SLOW_ROOFLINE)
    with FakeTensorMode(), recorder:
        x = torch.empty(8)
        recorder.recording = True
        torch.ops.prim.device.default(x)  # what a fake tensor dispatches for .device; a real one does not
        assert (recorder.clock, recorder.ops) == (0.0, 0)
        x + x
        assert recorder.ops == 1 and recorder.clock == pytest.approx(1.0)
        recorder.recording = False


def test_an_estimate_leaves_torchs_random_state_alone_even_when_it_calibrates(tmp_path):
    from zico_workloads.curves import costs

    costs._measured_cpu_cost.cache_clear()  # the first estimate in a process measures the machine
    state = torch.get_rng_state()
    estimate_curve("digits-cnn", {"batch_size": 8}, "cpu", tmp_path, steady=1)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_roofline_clock_is_the_alternative_and_other_clocks_are_refused(tmp_path):
    params = {"batch_size": 8}
    measured = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1)
    roofline = estimate_curve("digits-cnn", params, "cpu", tmp_path, steady=1, timing="roofline")
    assert measured.meta["cost_model"].endswith("+measured-ops")
    assert not roofline.meta["cost_model"].endswith("+measured-ops")
    assert roofline.peak_bytes == measured.peak_bytes  # the clock moves steps in time, never bytes
    with pytest.raises(ValueError, match="timing: expected one of measured, roofline, got 'wall'"):
        estimate_curve("digits-cnn", params, "cpu", tmp_path, timing="wall")


def test_the_roofline_charges_a_view_no_bytes_and_an_embedding_only_the_rows_it_reads():
    table, ids = fake((50_000, 768)), fake((2, 64), torch.int64)
    with MODE:
        t = table.t()
        rows = torch.nn.functional.embedding(ids, table)
    cost = DeviceCost("test", 1e12, 1e12, bytes_per_s=1e9, overhead_s=1e-6)
    assert cost.op_seconds(aten.t.default, (table,), {}, t) == pytest.approx(1e-6)  # 154 MB would be 0.3 s
    read = ids.numel() * 8 + 2 * rows.numel() * 4  # indices, the gathered rows, the output
    assert cost.op_seconds(aten.embedding.default, (table, ids), {}, rows) == pytest.approx(1e-6 + read / 1e9)
