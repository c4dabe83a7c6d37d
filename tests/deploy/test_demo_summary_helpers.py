"""scripts/demo.py's summary helpers: the device peak is read from the stored device timeline only once the
control consumer has stored past the jobs' end, and a process that died is reported with its real log path."""
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

import pytest
from django.db import connection

from zico.cluster.models import Device, Node
from zico.telemetry.models import TimelinePoint

MIB = 1 << 20


@pytest.fixture(scope="module")
def demo(load_script):
    return load_script("demo.py", "zico_demo_script")


def _point(device, second, reserved):
    return TimelinePoint(device=device, job=None, second=second, time=datetime.fromtimestamp(second, tz=timezone.utc),
                         allocated_bytes=reserved // 2, reserved_bytes=reserved)


@pytest.mark.django_db(transaction=True)
def test_the_device_peak_waits_for_the_consumer_to_store_past_the_jobs_end(demo):
    device = Device.objects.create(node=Node.objects.create(host="demo-peak"), index=0, kind="cpu", name="CPU pool",
                                   total_bytes=1 << 30, budget_bytes=1 << 30)
    t_end = int(time.time()) - 3
    TimelinePoint.objects.bulk_create([_point(device, t_end - 10 + i, 100 * MIB) for i in range(10)])

    def consumer_catches_up():  # the last seconds, with the run's peak, are stored a moment later
        time.sleep(1.5)
        try:
            TimelinePoint.objects.bulk_create([_point(device, t_end, 268 * MIB), _point(device, t_end + 1, 90 * MIB)])
        finally:
            connection.close()  # this thread's own connection

    late = threading.Thread(target=consumer_catches_up)
    late.start()
    try:
        points = TimelinePoint.objects.filter(device=device, job__isnull=True, second__gte=t_end - 10)
        assert demo.stored_device_peak(points, t_end + 0.4, timeout=10) == 268 * MIB
    finally:
        late.join()


@pytest.mark.django_db
def test_the_device_peak_is_none_when_nothing_was_stored(demo):
    device = Device.objects.create(node=Node.objects.create(host="demo-none"), index=0, kind="cpu", name="CPU pool",
                                   total_bytes=1 << 30, budget_bytes=1 << 30)
    points = TimelinePoint.objects.filter(device=device, job__isnull=True)
    assert demo.stored_device_peak(points, time.time(), timeout=0.5) is None


def test_a_process_that_exited_is_reported_with_its_real_log_path(demo, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    with pytest.raises(SystemExit) as exc:
        demo.wait_for("nothing", lambda: False, 5, {"consumer": dead}, log_dir=tmp_path)
    message = str(exc.value)
    assert "$ZICO_VAR_DIR" not in message
    assert "consumer exited with code 3" in message and str(tmp_path / "consumer.log") in message
