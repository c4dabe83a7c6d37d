"""When Redis is down the pages still serve the stored timeline and say that live data is unavailable."""
import pytest

pytestmark = pytest.mark.django_db

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_job_memory_falls_back_to_stored_points(cluster, client_for, personas, settings):
    settings.REDIS_URL = DEAD_REDIS
    d = client_for(personas.owner).get(f"/data/jobs/{cluster.acme_job.pk}/memory.json", {"window": 300}).json()
    assert d["live"]["ok"] is False
    assert len(d["points"]) == 30 and d["summary"]["peak_reserved_bytes"] == 12 * (1 << 30)
    assert d["summary"]["peak_allocated_bytes"] == 10 * (1 << 30)


def test_device_timeline_falls_back_to_stored_points(cluster, client_for, personas, settings):
    settings.REDIS_URL = DEAD_REDIS
    d = client_for(personas.staff).get(f"/data/devices/{cluster.device.pk}/timeline.json", {"window": 300}).json()
    assert d["live"]["ok"] is False
    assert {k: len(v) for k, v in d["series"].items()} == {str(cluster.acme_job.pk): 30, str(cluster.rival_job.pk): 30}
    assert len(d["pool"]) == 30

