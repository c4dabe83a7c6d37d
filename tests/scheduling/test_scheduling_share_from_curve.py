"""The scheduler reads a job's measured compute share from its stored curve (zico.scheduling.snapshot), and
assumes the default where none was measured. No database: the curve is the stored JSON."""
from placement.compute_share import MEASURED_KEY, SHARE_KEY, stored_share, with_measured_share
from placement.curves import curve_from_dict, triangular_curve
from zico.scheduling.snapshot import DEFAULT_COMPUTE_SHARE, compute_share

MiB = 1 << 20


def test_the_measured_share_travels_with_the_curve_and_the_scheduler_uses_it():
    c = triangular_curve(10 * MiB, 50 * MiB, 0.2)
    assert stored_share(c) is None and compute_share(c) == DEFAULT_COMPUTE_SHARE
    m = with_measured_share(c, 0.2, 0.3)
    loaded = curve_from_dict(m.to_dict())  # the stored JSON, as the scheduler's snapshot reads it
    assert loaded.meta[SHARE_KEY] == 0.75
    assert loaded.meta[MEASURED_KEY] == {"solo_step_s": 0.2, "colocated_step_s": 0.3, "copies": 2}
    assert compute_share(loaded) == 0.75
    assert (loaded.peak_bytes, loaded.persistent_bytes) == (c.peak_bytes, c.persistent_bytes)
