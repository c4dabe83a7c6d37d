"""zico.web.live against the real Redis: cursors, the first read's backfill, skipping ahead, bad entries."""
import time

import pytest

from zico_contracts import keys
from zico.web import live


def test_a_cursor_returns_each_sample_once_in_order(rdb, publish):
    first = live.read_samples(lambda s: True)
    assert first.ok and first.samples == []
    ids = [publish(job=1, device="gpu.n.0", allocated=i, reserved=i) for i in range(3)]
    got = live.read_samples(lambda s: True, cursor=first.cursor)
    assert [s["allocated"] for s in got.samples] == [0, 1, 2] and got.cursor == ids[-1]
    again = live.read_samples(lambda s: True, cursor=got.cursor)
    assert again.samples == [] and again.cursor == got.cursor


def test_first_read_covers_only_the_backfill_window(rdb, publish):
    old_ms = int((time.time() - live.BACKFILL_S - 30) * 1000)
    rdb.xadd(keys.TELEMETRY_STREAM, {"data": '{"job": 1, "allocated": 7}'}, id=f"{old_ms}-0")
    publish(job=1, device="gpu.n.0", allocated=8, reserved=8)
    assert [s["allocated"] for s in live.read_samples(lambda s: True).samples] == [8]


def test_filter_and_malformed_entries(rdb, publish):
    start = live.read_samples(lambda s: True).cursor
    rdb.xadd(keys.TELEMETRY_STREAM, {"data": "not json"})
    rdb.xadd(keys.TELEMETRY_STREAM, {"other": "field"})
    publish(job=1, device="gpu.n.0", allocated=1, reserved=1)
    publish(job=2, device="gpu.n.0", allocated=2, reserved=2)
    got = live.read_samples(lambda s: s.get("job") == 2, cursor=start)
    assert [s["allocated"] for s in got.samples] == [2]


def test_a_reader_far_behind_skips_to_the_newest_samples(rdb, publish, monkeypatch):
    monkeypatch.setattr(live, "MAX_SAMPLES_PER_READ", 4)
    start = live.read_samples(lambda s: True).cursor
    for i in range(10):
        publish(job=1, device="gpu.n.0", allocated=i, reserved=i)
    got = live.read_samples(lambda s: True, cursor=start)
    assert [s["allocated"] for s in got.samples] == [6, 7, 8, 9]


def test_redis_down_reads_are_reported_not_raised(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    got = live.read_samples(lambda s: True, cursor="5-0")
    assert (got.ok, got.cursor, got.samples) == (False, "5-0", [])


@pytest.mark.parametrize("bad", ["x", "1-", "-1", "1-2-3", "(1-0", "1" * 20 + "-0"])
def test_a_malformed_cursor_is_named(bad):
    with pytest.raises(ValueError, match="^cursor:"):
        live.read_samples(lambda s: True, cursor=bad)
