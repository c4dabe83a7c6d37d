"""A job's wall-clock limit, resolved and carried (zico_contracts.walltime, zico_contracts.specs): the least of the
job's request, its tenant's maximum and the platform's, named by its source; the run spec carries it both ways and
refuses a malformed one naming the field; the reason's words. No database, no process."""
import math

import pytest

from zico_contracts import walltime
from zico_contracts.specs import ProfileSpec, RunSpec, SpecError
from zico_contracts.walltime import WallLimit, WallLimitError, resolve


@pytest.mark.parametrize("job_s, tenant_s, platform_s, expected", [
    (None, None, 86400, WallLimit(86400, "platform")),       # the default alone
    (None, 3600, 86400, WallLimit(3600, "tenant")),          # a tenant maximum below it
    (600, 3600, 86400, WallLimit(600, "job")),               # the job's own request below both
    (3, None, 86400, WallLimit(3, "job")),
    (3600, 3600, 86400, WallLimit(3600, "job")),             # a tie names the job's own request
    (None, 3600, 3600, WallLimit(3600, "tenant")),           # ... and the tenant's before the platform's
    (7200, 3600, 86400, WallLimit(3600, "tenant")),          # resolve takes the least (submit refuses this one)
    (None, None, None, None),                                # none set: no limit
])
def test_the_least_limit_set_holds_with_its_source(job_s, tenant_s, platform_s, expected):
    assert resolve(job_s=job_s, tenant_s=tenant_s, platform_s=platform_s) == expected


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, True, "60"])
def test_a_limit_that_is_not_a_positive_number_is_refused_naming_its_source(bad):
    with pytest.raises(WallLimitError) as exc:
        resolve(job_s=bad, platform_s=86400)
    assert exc.value.field == "job"


@pytest.mark.parametrize("seconds, words", [(3, "3 s"), (1.5, "1.5 s"), (90, "1 min 30 s"), (600, "10 min"),
                                            (3600, "1 h 0 min"), (5400, "1 h 30 min"), (86400, "24 h 0 min")])
def test_durations_in_words(seconds, words):
    assert walltime.format_duration(seconds) == words


def test_the_reason_names_the_limit_and_its_source():
    assert walltime.reason(WallLimit(3600, "tenant")) == \
        "ran past its wall-clock limit of 1 h 0 min (the tenant's limit): stopped"
    assert walltime.reason(WallLimit(3, "job")) == "ran past its wall-clock limit of 3 s (the job's own limit): stopped"
    assert "ZICO_JOB_TIME_LIMIT_S" in walltime.reason(WallLimit(86400, "platform"))


def test_run_and_profile_specs_carry_the_limit():
    spec = RunSpec(job=7, workload="digits-cnn", params={}, wall_limit=WallLimit(3, "job")).to_dict()
    assert spec["wall_limit"] == {"seconds": 3, "source": "job"}
    assert RunSpec.from_dict(7, spec).wall_limit == WallLimit(3, "job")
    assert "wall_limit" not in RunSpec(job=7, workload="digits-cnn", params={}).to_dict()  # older readers unchanged
    assert RunSpec.from_dict(7, {"workload": "digits-cnn"}).wall_limit is None
    prof = ProfileSpec(job=7, workload="digits-cnn", params={}, time_limit_s=120.0,
                       wall_limit=WallLimit(60, "tenant")).to_dict()
    parsed = ProfileSpec.from_dict(7, prof)
    assert (parsed.time_limit_s, parsed.wall_limit) == (120.0, WallLimit(60, "tenant"))  # the soft limit stays


@pytest.mark.parametrize("bad, field", [({"seconds": 0, "source": "job"}, "wall_limit.seconds"),
                                        ({"seconds": 3, "source": "me"}, "wall_limit.source"),
                                        (3600, "wall_limit")])
def test_a_malformed_limit_in_a_spec_is_refused_naming_the_field(bad, field):
    with pytest.raises(SpecError) as exc:
        RunSpec.from_dict(7, {"workload": "digits-cnn", "wall_limit": bad})
    assert exc.value.field == field
