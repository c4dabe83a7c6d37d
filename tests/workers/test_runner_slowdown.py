"""Measured and predicted slowdown share one definition and one solo reference (Note [Slowdown, predicted
and measured] in zico.web.job_panels): the iteration time of the curve the placement was planned with."""
import pytest

from workers.runner import RunSpec, slowdown_metrics


def _spec(curve_iteration_s, plan):
    return RunSpec.parse(7, {"workload": "digits-cnn", "params": {}, "plan": plan,
                             "curve": {"iteration_s": curve_iteration_s}})


def test_measured_slowdown_is_the_mean_iteration_over_the_plans_solo_reference():
    plan = {"job_ids": [3, 7], "predicted_slowdown": [1.1, 1.4]}
    m = slowdown_metrics(_spec(0.02, plan), train_s=2.8, ran=100)
    assert m["mean_iteration_s"] == pytest.approx(0.028)
    assert m["solo_iteration_s"] == 0.02
    assert m["slowdown"] == pytest.approx(1.4)
    assert m["predicted_slowdown"] == 1.4            # this job's entry of the plan, beside the measured one


def test_a_curve_slower_than_the_run_shows_as_a_slowdown_below_one_with_both_times():
    m = slowdown_metrics(_spec(0.28, {}), train_s=2.9, ran=100)
    assert m["slowdown"] == pytest.approx(0.029 / 0.28, rel=1e-3)
    assert m["mean_iteration_s"] == pytest.approx(0.029) and "predicted_slowdown" not in m


def test_nothing_is_claimed_without_iterations_or_a_curve():
    assert slowdown_metrics(_spec(0.28, {}), train_s=0.0, ran=0) == {}
    spec = RunSpec.parse(7, {"workload": "digits-cnn", "params": {}})
    assert slowdown_metrics(spec, train_s=1.0, ran=10) == {"mean_iteration_s": 0.1}


def test_the_slowdown_is_measured_beside_neighbours_and_the_whole_run_kept_beside_it():
    # Note [Slowdown beside neighbours]: 40 of 120 iterations at 0.4 s beside tiny-lm, the rest alone at 0.2 s
    plan = {"job_ids": [3, 7], "predicted_slowdown": [1.9, 1.2]}
    m = slowdown_metrics(_spec(0.2, plan), train_s=40 * 0.4 + 80 * 0.2, ran=120, beside_iteration_s=0.4)
    assert m["slowdown"] == pytest.approx(2.0)            # what the plan's 1.9 predicts
    assert m["slowdown_run"] == pytest.approx(32 / 120 / 0.2, abs=1e-4)  # the solo tail mixed in
    alone = slowdown_metrics(_spec(0.2, {}), train_s=24.0, ran=120)
    assert alone["slowdown"] == alone["slowdown_run"] == pytest.approx(1.0)
