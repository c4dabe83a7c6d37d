"""The real-run experiment (tools.bench.experiment): its modes on a tiny pair of real job processes (time
slicing alternates single iterations; uncoordinated jobs past the budget fail out of memory), its budgets and
held-byte curves, the slowdowns it measures, and its report's fields, from a literal report."""
import pytest

from tools.bench.experiment import budgets_for, held_curve, main
from tools.bench.experiment_modes import Job, colocated_slowdowns, run_mode
from tools.bench.experiment_report import markdown, throughput_vs_sequential

MiB = 1 << 20
DIGITS = Job("digits-cnn", {"batch_size": 16, "image_size": 16, "data": "synthetic"})
LM = Job("tiny-lm", {"batch_size": 8, "seq_len": 64, "data": "synthetic"})


def test_time_slicing_runs_one_iteration_at_a_time_and_alternates():
    r = run_mode("slicing", [DIGITS, LM], 256 * MiB, iterations=4)
    assert [j["status"] for j in r["jobs"]] == ["succeeded", "succeeded"], r["jobs"]
    spans = sorted((g, e, n) for n, j in enumerate(r["jobs"]) for g, e in zip(j["go"], j["ends"]))
    assert len(spans) == 8
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        assert start >= end  # never two iterations in flight
    # turns alternate (round robin); a job may go twice running when the other has not asked yet (the slicer
    # never idles the device waiting for a job that is between its iterations)
    order = [n for _, _, n in spans]
    assert sum(a != b for a, b in zip(order, order[1:])) >= 3, order
    assert r["gate_delay_s"] > 0 and r["makespan_s"] > 0 and r["oom_failures"] == 0
    assert 0 < r["peak_bytes"] <= r["budget_bytes"]


def test_uncoordinated_jobs_past_the_budget_fail_out_of_memory_for_real():
    r = run_mode("uncoordinated", [LM, LM], 36 * MiB, iterations=6)  # each alone holds ~28 MiB
    assert r["oom_failures"] >= 1 and r["makespan_s"] is None
    failed = [j for j in r["jobs"] if j["status"] == "failed"]
    assert all("OutOfMemoryError" in j["reason"] and "agent refused" in j["reason"] for j in failed)
    assert r["peak_bytes"] <= r["budget_bytes"] and r["capacity_bytes"] == 36 * MiB  # the hard limit held


def test_modes_refuse_bad_input():
    with pytest.raises(ValueError, match="mode must be one of"):
        run_mode("naive", [LM], MiB)
    with pytest.raises(ValueError, match="zico needs one memory curve per job"):
        run_mode("zico", [LM, LM], MiB)


def _curve(persistent, peak):
    return {"version": 1, "source": "allocator-trace", "device": "cpu", "iteration_s": 0.1,
            "persistent_bytes": persistent, "peak_bytes": peak, "points": [[0.0, persistent], [0.5, peak]]}


def test_held_curves_carry_the_solo_overhead_and_budgets_step_from_the_sum_to_the_floor():
    h = held_curve(_curve(10 * MiB, 50 * MiB), 60 * MiB)
    assert (h["persistent_bytes"], h["peak_bytes"], h["points"]) == (20 * MiB, 60 * MiB, [[0.0, 20 * MiB], [0.5, 60 * MiB]])
    a, b = held_curve(_curve(10 * MiB, 50 * MiB), 60 * MiB), held_curve(_curve(5 * MiB, 30 * MiB), 40 * MiB)
    budgets, total, floor = budgets_for([a, b], 3, 0.05)
    assert total == 100 * MiB and budgets[0] == total
    assert floor == pytest.approx((60 + 15) * MiB / 0.95, abs=2)  # max(peak_i + persistent_j) / (1 - headroom)
    assert budgets[-1] == pytest.approx(floor, abs=2) and budgets[0] > budgets[1] > budgets[2]
    halfway, _, _ = budgets_for([a, b], 3, 0.05, at=[0.5])  # --budget-at 0.5: one budget, halfway to the floor
    assert halfway == [int(total - 0.5 * (total - floor))]


def _run(ends, go):
    return {"jobs": [{"status": "succeeded", "ends": e, "go": g} for e, g in zip(ends, go)]}


def test_colocated_slowdown_counts_only_iterations_while_both_ran():
    # job 0: iterations of 0.2 s; job 1 ends at 2.0, after which job 0's 1.0 s iterations do not count
    run = _run([[0.2, 0.4, 0.6, 0.8, 3.0], [1.0, 2.0]], [[0.0, 0.2, 0.4, 0.6, 2.0], [0.0, 1.0]])
    s = colocated_slowdowns(run, [0.1, 0.5])
    assert s[0] == pytest.approx(2.0)  # warm-up (first) excluded: 0.2 / 0.1
    assert s[1] == pytest.approx(2.0)  # its second iteration: 1.0 / 0.5


def _mode(makespan, peak, oom=0, failures=0, violations=0, delay=0.0):
    return {"makespan_s": makespan, "peak_bytes": peak, "oom_failures": oom, "failures": failures,
            "budget_violations": violations, "gate_delay_s": delay, "jobs": [{}, {}]}


def test_the_report_gives_every_figure_per_pair_budget_and_mode():
    row = {"pair": "a + b", "budget_bytes": 80 * MiB, "sum_held_peaks_bytes": 100 * MiB, "floor_bytes": 70 * MiB,
           "modes": {"sequential": _mode(10.0, 60 * MiB), "uncoordinated": _mode(None, 80 * MiB, oom=1, failures=1),
                     "slicing": _mode(9.0, 75 * MiB, delay=4.5), "zico": _mode(8.0, 79 * MiB, violations=1, delay=1.25)}}
    for n, mode in enumerate(row["modes"].values()):
        mode["jobs"] = [{"label": "a", "status": "succeeded", "reason": ""},
                        {"label": "b", "status": "failed" if n == 1 else "succeeded",
                         "reason": "OutOfMemoryError: agent refused: budget" if n == 1 else ""}]
    report = {"device": "cpu", "iterations": 12, "slots": 2, "gate_headroom": 0.05, "wall_s": 61.0,
              "jobs": {"a": "digits-cnn:batch_size=8"}, "profiles": {"a": {"peak_bytes": 50 * MiB,
              "persistent_bytes": 5 * MiB, "held_peak_bytes": 60 * MiB, "iteration_s": 0.1}},
              "shares": {"a": {"solo_step_s": 0.1, "colocated_step_s": 0.15, "compute_share": 0.75}}, "rows": [row],
              "predictions": [{"pair": "a + b", "budget_bytes": 80 * MiB, "job": "a", "mode": "uncoordinated",
                               "predicted": 1.5, "measured": 1.25, "error": 0.2, "in_sample": False},
                              {"pair": "a + b", "budget_bytes": 80 * MiB, "job": "b", "mode": "zico",
                               "predicted": 1.2, "measured": 1.5, "error": -0.2, "in_sample": False,
                               "predicted_worker": 1.56, "error_worker": 0.04}]}
    assert throughput_vs_sequential(row, "zico") == pytest.approx(1.25)
    assert throughput_vs_sequential(row, "uncoordinated") is None
    text = markdown(report)
    assert "| a + b | 80.0 | 0.80 | (d) zico | 1.25x | 8.00 | 79.0 | 0 | 1 | 1.25 |" in text
    assert "| a + b | 80.0 | 0.80 | (b) uncoordinated | - | - | 80.0 | 1 of 2 OOM | 0 | 0.00 |" in text
    assert "| a + b | 80.0 | 0.80 | (c) slicing | 1.11x | 9.00 | 75.0 | 0 | 0 | 4.50 |" in text
    assert "| a | `digits-cnn:batch_size=8` | 50.0 | 5.0 | 60.0 | 100 | 150 | 0.75 | - |" in text
    assert "| a + b | 80.0 | (b) | a | 1.25 | 1.50 | +20 % | - | - |" in text
    assert "| a + b | 80.0 | (d) | b | 1.50 | 1.20 | -20 % | 1.56 | +4 % |" in text  # the worker's shares too
    assert "20 % with the experiment's shares, 4 % with the worker's (n = 1)" in text
    report["shares"]["a"].update(worker_share=0.62, worker_method="contention")
    assert "| 150 | 0.75 | 0.62 (contention) |" in markdown(report)
    assert "- a + b, (b) uncoordinated, b: OutOfMemoryError: agent refused: budget" in text
    assert "Wall time 61 s" in text


@pytest.mark.parametrize("argv, message", [
    (["--pair", "digits-cnn+nope"], "expected A+B with A and B among"),
    (["--device", "tpu"], "--device must be cpu or cuda"),
    (["--iterations", "2"], "--iterations must be at least 4"),
    (["--budget-at", "1.5"], "--budget-at must lie in [0, 1]"),
])
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_cuda_device_is_accepted_and_brings_its_own_pairs(capsys):
    assert main(["--device", "cuda:0", "--pair", "resnet50+tiny-lm"]) == 2  # refused before any device is used
    assert "among resnet50, bert-base, gpt2-small" in capsys.readouterr().err


def test_the_measured_section_is_replaced_in_place_and_the_simulated_page_above_it_kept():
    from tools.bench.experiment_report import MEASURED_HEADING, measured_section, replace_section

    page = "# Experiment\n\nsimulated table\n"
    once = replace_section(page, f"{MEASURED_HEADING}\n\nrun 1\n")
    assert once == f"# Experiment\n\nsimulated table\n\n{MEASURED_HEADING}\n\nrun 1\n"
    assert replace_section(once, f"{MEASURED_HEADING}\n\nrun 2\n") == once.replace("run 1", "run 2")
    assert replace_section("", f"{MEASURED_HEADING}\n") == f"{MEASURED_HEADING}\n"
    assert measured_section(once) == f"{MEASURED_HEADING}\n\nrun 1\n" and measured_section(page) == ""


def test_every_default_job_is_a_valid_catalog_job_and_every_default_pair_names_them():
    from tools.bench.experiment import CPU_JOBS, CPU_PAIRS, CUDA_JOBS, CUDA_PAIRS, parse_pairs
    from tools.colocate import check_inputs, parse_job

    for device, jobs, pairs in (("cpu", CPU_JOBS, CPU_PAIRS), ("cuda:0", CUDA_JOBS, CUDA_PAIRS)):
        parsed = [parse_job(text) for text in jobs.values()]
        assert [key for key, _ in parsed] == list(jobs)
        check_inputs(parsed, device, iterations=12)  # the catalog's own validation; raises UsageError naming a bad one
        assert len(parse_pairs(pairs, jobs)) == 3
