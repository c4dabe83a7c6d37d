"""Two ``run_job`` tasks of one job in one worker process (Note [Two runs of one job] in workers/runner.py): a run of
a later placement stops the run of an earlier one and goes ahead once it has ended; a run of the same or an earlier
placement is refused, touching nothing."""
import threading
import time

import pytest

from workers.runner import _JobsHere
from zico_contracts.specs import RunSpec


def spec(placement, job=7):
    return RunSpec(job=job, workload="digits-cnn", params={}, placement=placement)


def test_a_run_of_the_same_or_an_earlier_placement_is_refused():
    here = _JobsHere()
    with here.claim(spec(2), 5) as claim:
        for placement in (2, 1, None):
            with pytest.raises(RuntimeError, match="job 7 is already running here"):
                with here.claim(spec(placement), 5):
                    pass
        assert not claim.superseded
        with here.claim(spec(1, job=8), 5):  # another job
            pass
    with here.claim(spec(2), 5):  # released
        pass


def test_a_later_placements_run_stops_the_earlier_one_and_waits_for_its_end():
    here = _JobsHere()
    stale = here.claim(spec(1), 5)
    claim = stale.__enter__()
    got = []
    later = threading.Thread(target=lambda: got.append(here.claim(spec(2), 5).__enter__()))
    later.start()
    deadline = time.monotonic() + 5
    while not claim.superseded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert claim.superseded  # stopped: its stop check now says "aborted"
    assert later.is_alive() and not got  # the later run waits for the stale one's end
    stale.__exit__(None, None, None)
    later.join(5)
    assert got and got[0].placement == 2 and not got[0].superseded


def test_a_stale_run_that_does_not_end_in_time_refuses_the_later_one():
    here = _JobsHere()
    with here.claim(spec(1), 5) as claim:
        with pytest.raises(RuntimeError, match="stale run of placement 1 did not end within 0.1 s"):
            with here.claim(spec(2), 0.1):
                pass
        assert claim.superseded
