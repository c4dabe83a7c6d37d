"""The run_job and profile_job specs (zico_contracts.specs): what the web side builds is what the worker parses,
with the same class; a malformed spec is refused naming the field, on either side."""
import pytest

from zico_contracts.codejob import CodeSpec
from zico_contracts.specs import ProfileSpec, RunSpec, SpecError

CODE = CodeSpec("http://web/api/worker/jobs/5/code", "a" * 64, "tar.gz", 10, ["python", "train.py"], "tok",
                "http://web/api/worker/jobs/5/files/", env={"SEED": "1"}, code_limits={"max_files": 9},
                output_limits={"max_files": 3})


def test_a_catalog_run_spec_round_trips():
    spec = RunSpec(job=5, workload="digits-cnn", params={"iterations": 4}, placement=9, run_token="7d4c",
                   curve={"version": 1}, plan={"job_ids": [5]}, job_created_at="2026-11-29T12:00:00+00:00", tenant=2)
    d = spec.to_dict()
    assert "job" not in d and "code_url" not in d  # the job id is the task's first argument
    assert RunSpec.from_dict(5, d) == spec


def test_a_code_job_run_and_profile_spec_round_trip_with_their_code_fields():
    run = RunSpec(job=5, workload="", params={}, placement=1, tenant=3, code=CODE)
    d = run.to_dict()
    assert d["command"] == ["python", "train.py"] and d["job_token"] == "tok"
    assert RunSpec.from_dict(5, d) == run
    prof = ProfileSpec(job=5, workload="", params={}, time_limit_s=30.0, tenant=3, code=CODE)
    assert ProfileSpec.from_dict(5, prof.to_dict()) == prof


def test_a_profile_spec_leaves_out_unset_counts_and_defaults_them():
    prof = ProfileSpec(job=2, workload="digits-cnn", params={}, time_limit_s=42.0, tenant=1)
    assert prof.to_dict() == {"workload": "digits-cnn", "params": {}, "time_limit_s": 42.0, "tenant": 1}
    parsed = ProfileSpec.from_dict(2, {**prof.to_dict(), "steady": 5})
    assert (parsed.warmup_iterations, parsed.steady_iterations) == (ProfileSpec.DEFAULT_WARMUP, 5)


@pytest.mark.parametrize("job_id, spec, field", [
    (0, {"workload": "x"}, "job_id"),
    (2, "x", "spec"),
    (2, {"workload": 3}, "workload"),
    (2, {"workload": "x", "time_limit_s": 0}, "time_limit_s"),
    (2, {"workload": "x", "time_limit_s": True}, "time_limit_s"),
    (2, {"workload": "x", "warmup": -1}, "warmup"),
    (2, {"workload": "x", "steady": 0}, "steady"),
    (2, {"workload": "x", "tenant": "1"}, "tenant"),
    (2, {"workload": "x", "job_budget_bytes": 0}, "job_budget_bytes"),
    (2, {"workload": "x", "job_budget_bytes": "128MiB"}, "job_budget_bytes"),
    (2, {**CODE.to_spec(), "workload": "", "command": []}, "command"),
])
def test_a_bad_profile_spec_names_the_field(job_id, spec, field):
    with pytest.raises(SpecError, match=f"^{field}") as err:
        ProfileSpec.from_dict(job_id, spec)
    assert err.value.field == field


def test_the_web_side_cannot_build_a_spec_the_worker_would_refuse():
    with pytest.raises(SpecError, match="^run_token"):
        RunSpec(job=5, workload="digits-cnn", params={}, run_token="").to_dict()
    with pytest.raises(SpecError, match="^workload"):
        ProfileSpec(job=5, workload="", params={}).to_dict()  # neither a catalog key nor code


def test_a_jobs_own_budget_travels_in_both_specs_and_a_bad_one_is_named():
    run = RunSpec(job=5, workload="digits-cnn", params={}, tenant=2, job_budget_bytes=128 << 20)
    assert run.to_dict()["job_budget_bytes"] == 128 << 20 and RunSpec.from_dict(5, run.to_dict()) == run
    prof = ProfileSpec(job=5, workload="", params={}, tenant=3, code=CODE, job_budget_bytes=64 << 20)
    assert ProfileSpec.from_dict(5, prof.to_dict()).job_budget_bytes == 64 << 20
    assert "job_budget_bytes" not in RunSpec(job=5, workload="digits-cnn", params={}).to_dict()  # none: left out
    with pytest.raises(SpecError, match="^job_budget_bytes: expected a positive number of bytes, got -1"):
        RunSpec.from_dict(5, {"workload": "digits-cnn", "job_budget_bytes": -1})
