"""One device agent per device (an flock that dies with its holder) and no forking Celery pool."""
import os
import subprocess
import sys
import textwrap

import pytest
from celery.concurrency import get_implementation

from workers.agent import DeviceLocked, lock_device
from workers.bootstrap import check_pool

HOLD = textwrap.dedent("""
    import sys, time
    from workers.agent import lock_device
    lock_device(sys.argv[1], "cpu.h1.0")
    print("held", flush=True)
    time.sleep(600)
""")


def test_a_second_agent_for_the_same_device_is_refused_until_the_first_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=os.environ.copy())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DeviceLocked) as err:
            lock_device(tmp_path, "cpu.h1.0")
        assert f"worker pid {holder.pid}" in str(err.value) and "cpu.h1.0" in str(err.value)
        fd = lock_device(tmp_path, "cpu.h1.1")  # another device is free
        os.close(fd)
    finally:
        holder.kill()
        holder.wait()
    fd = lock_device(tmp_path, "cpu.h1.0")  # SIGKILL released it: no stale lock
    os.close(fd)


@pytest.mark.parametrize("pool", ["prefork", "solo", "eventlet", "gevent"])
def test_any_pool_but_threads_is_refused_naming_the_fix(pool):
    with pytest.raises(SystemExit) as err:
        check_pool(get_implementation(pool))
    assert "-P threads" in str(err.value)


def test_the_threads_pool_is_accepted():
    check_pool(get_implementation("threads"))
