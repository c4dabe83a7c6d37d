"""A run_job spec is checked field by field before anything runs; errors name the field."""
import pytest

from workers.nvml import DeviceInfoError, cpu_info, parse_bytes
from workers.runner import RunSpec, SpecError


def test_a_full_spec_parses():
    spec = RunSpec.parse(3, {"workload": "digits-cnn", "params": {"iterations": 5}, "placement": 9,
                             "run_token": "7d4c", "plan": {"job_ids": [3], "predicted_slowdown": [1.1]},
                             "curve": {"version": 1}, "job_created_at": "2026-11-29T12:00:00+00:00", "tenant": 4})
    assert (spec.job, spec.workload, spec.params, spec.placement, spec.run_token, spec.job_created_at, spec.tenant) == \
        (3, "digits-cnn", {"iterations": 5}, 9, "7d4c", "2026-11-29T12:00:00+00:00", 4)


@pytest.mark.parametrize("job_id, spec, field", [
    (0, {"workload": "x"}, "job_id"),
    ("3", {"workload": "x"}, "job_id"),
    (3, [], "spec"),
    (3, {}, "workload"),
    (3, {"workload": "x", "params": [1]}, "params"),
    (3, {"workload": "x", "placement": "7"}, "placement"),
    (3, {"workload": "x", "curve": "big"}, "curve"),
    (3, {"workload": "x", "plan": 5}, "plan"),
    (3, {"workload": "x", "run_token": 5}, "run_token"),
    (3, {"workload": "x", "run_token": ""}, "run_token"),
    (3, {"workload": "x", "job_created_at": 1732881600}, "job_created_at"),
    (3, {"workload": "x", "tenant": "4"}, "tenant"),
    (3, {"workload": "x", "tenant": 0}, "tenant"),
])
def test_bad_specs_name_the_field(job_id, spec, field):
    with pytest.raises(SpecError, match=f"^{field}"):
        RunSpec.parse(job_id, spec)


def test_byte_sizes_parse_with_binary_and_decimal_units():
    assert parse_bytes("3GiB") == 3 << 30
    assert parse_bytes("512 MiB") == 512 << 20
    assert parse_bytes("2e9") == 2_000_000_000
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("2M") == 2 << 20 and parse_bytes("8g") == 8 << 30  # the allocator's short forms too
    for bad in ("lots", "3XB", "-1GiB"):
        with pytest.raises(ValueError, match="byte size"):
            parse_bytes(bad)
    for huge in ("inf", "1e400", "nan", "1e30"):
        with pytest.raises(ValueError, match=f"byte size too large: '{huge}'"):
            parse_bytes(huge)


def test_the_cpu_pool_needs_a_positive_capacity():
    assert cpu_info(1 << 30).total_bytes == 1 << 30
    with pytest.raises(DeviceInfoError, match="positive"):
        cpu_info(0)


CODE = {"workload": "", "code_url": "http://web/api/worker/jobs/3/code", "code_sha256": "a" * 64,
        "code_format": "tar.gz", "code_size_bytes": 10, "code_limits": {}, "command": ["python", "train.py"],
        "env": {}, "job_token": "t", "files_url": "http://web/api/worker/jobs/3/files/", "output_limits": {}}


def test_a_script_job_profiled_as_its_run_starts_gets_the_profile_defaults():
    spec = RunSpec.parse(3, {**CODE, "curve": None, "profile": {"time_limit_s": 60.0}})
    assert spec.profile == {"warmup": 1, "steady": 3, "time_limit_s": 60.0} and spec.curve is None
    assert RunSpec.parse(3, CODE).profile is None


@pytest.mark.parametrize("spec, field", [
    ({**CODE, "profile": [1]}, "profile"),
    ({"workload": "digits-cnn", "profile": {}}, "profile"),  # a catalog job is profiled by profile_job
    ({**CODE, "profile": {"steady": 0}}, "profile.steady"),
    ({**CODE, "profile": {"warmup": "1"}}, "profile.warmup"),
    ({**CODE, "profile": {"time_limit_s": -1}}, "profile.time_limit_s"),
])
def test_bad_profiles_name_the_field(spec, field):
    with pytest.raises(SpecError, match=f"^{field}"):
        RunSpec.parse(3, spec)


def test_a_default_bound_travels_as_the_jobs_budget_flagged_as_the_default():
    spec = RunSpec.parse(3, {**CODE, "profile": {}, "job_budget_bytes": 128 << 20, "job_budget_default": True})
    assert spec.job_budget_bytes == 128 << 20 and spec.job_budget_default is True
    assert spec.to_dict()["job_budget_default"] is True
    declared = RunSpec.parse(3, {**CODE, "job_budget_bytes": 128 << 20})
    assert declared.job_budget_default is False and "job_budget_default" not in declared.to_dict()


@pytest.mark.parametrize("spec", [
    {**CODE, "profile": {}, "job_budget_bytes": 128 << 20, "job_budget_default": 1},
    {**CODE, "profile": {}, "job_budget_default": True},  # a default bound of no bytes
    {**CODE, "job_budget_bytes": 128 << 20, "job_budget_default": True},  # a job with its curve has no default bound
])
def test_bad_default_bounds_name_the_field(spec):
    with pytest.raises(SpecError, match="^job_budget_default"):
        RunSpec.parse(3, spec)
