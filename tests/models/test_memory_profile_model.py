"""MemoryProfile stores curves in the DESIGN contract, validated by placement.curves."""
import pytest

from placement.curves import CurveError, triangular_curve
from zico.jobs.models import Job, MemoryProfile


def test_it_stores_a_valid_curve_and_its_headline_figures(personas):
    job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    curve = triangular_curve(100e6, 400e6, iteration_s=0.25)
    p = MemoryProfile.record(job, curve.to_dict())
    p.refresh_from_db()
    assert (p.source, p.peak_bytes, p.persistent_bytes, p.iteration_s) == ("estimate", 400_000_000, 100_000_000, 0.25)
    assert p.memory_curve().peak_bytes == pytest.approx(400e6)
    assert job.latest_profile() == p


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("points"), "points"),
    (lambda d: d.update(version=7), "version"),
    (lambda d: d.update(peak_bytes=1), "peak_bytes"),
    (lambda d: d.update(source="guess"), "source"),
])
def test_it_refuses_a_malformed_curve_and_stores_nothing(personas, mutate, field):
    job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    d = triangular_curve(1e6, 4e6).to_dict()
    mutate(d)
    with pytest.raises(CurveError, match=field):
        MemoryProfile.record(job, d)
    assert not MemoryProfile.objects.exists()
