"""``manage.py runscheduler``: the scheduler service, the only writer of placements.

    manage.py runscheduler [--policy memory-aware|fifo] [--interval 2] [--rounds N]

Runs a scheduling round (zico.scheduling.service) every ``--interval`` seconds (the next one at once
after a round whose policy ran out of its planning budget: Note [Planning budget] in placement.policies)
until SIGTERM or SIGINT, which end it cleanly after the round in progress. Several instances may run at once:
the round lock makes them take turns and lifecycle.place's conditional claim keeps any job from
being placed twice.

Unless ``ZICO_SCHEDULER_ESTIMATES`` is off, it estimates the memory curve of catalog jobs it sends to
profiling in a child process beside the rounds (Note [Estimates beside the rounds] in
zico.scheduling.estimates) and stops that child when it stops.

A new process resends the tasks of jobs left ``placed`` or ``profiling`` on its first round, and
again whenever the broker's Redis restarted (its ``run_id`` changed: a Redis without persistence
comes back empty, without the tasks no worker had taken yet); see Note [Scheduler restarts] in
zico.scheduling.recovery.
"""
from __future__ import annotations

import logging
import signal
import threading
import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, close_old_connections

from zico.scheduling.estimates import BackgroundEstimates
from zico.scheduling.service import POLICIES, Scheduler, make_policy

log = logging.getLogger("zico.scheduling")


class Command(BaseCommand):
    help = "Place ready jobs on devices (and send profiling for jobs without a curve), round after round."

    def add_arguments(self, parser):
        parser.add_argument("--policy", default="memory-aware", help=f"one of {', '.join(POLICIES)}")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between rounds (default 2)")
        parser.add_argument("--rounds", type=int, default=None, help="stop after this many rounds (tests)")

    def handle(self, *args, policy: str, interval: float, rounds: int | None, **options):
        if policy not in POLICIES:
            raise CommandError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
        if interval < 0:
            raise CommandError(f"--interval: must be >= 0 seconds, got {interval}")
        stop = threading.Event()

        def on_signal(signum, frame):
            self.stdout.write(f"received {signal.Signals(signum).name}, stopping after this round")
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        estimates = BackgroundEstimates(settings.ZICO_ESTIMATE_TIME_LIMIT_S) if settings.ZICO_SCHEDULER_ESTIMATES \
            else None
        scheduler = Scheduler(make_policy(policy), estimates=estimates)
        slowdown = getattr(scheduler.policy, "max_slowdown", None)
        limit = f", slowdown limit {slowdown:g}x" if slowdown is not None else ""
        if getattr(scheduler.policy, "max_group", None) is not None:
            limit += f", at most {scheduler.policy.max_group} jobs per device"
        background = "on" if estimates else "off (ZICO_SCHEDULER_ESTIMATES)"
        self.stdout.write(f"scheduler ready: policy {policy}{limit}, a round every {interval:g} s, background "
                          f"estimates {background}", ending="\n")
        self.stdout.flush()
        done, db_down_since = 0, None
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2.0, socket_connect_timeout=2.0)
        broker_run = _run_id(broker)
        while not stop.is_set() and (rounds is None or done < rounds):
            close_old_connections()
            run = _run_id(broker)
            if run is not None and broker_run is not None and run != broker_run:
                log.warning("the broker's Redis restarted (run_id changed); resending the tasks of placed and "
                            "profiling jobs")
                scheduler.recovered = False
            broker_run = run or broker_run
            t0, res = time.monotonic(), None
            try:
                res = scheduler.run_round()
            except (OperationalError, InterfaceError) as exc:  # database down or restarting: wait it out
                if db_down_since is None:
                    db_down_since = time.monotonic()
                    log.warning("database unreachable, rounds paused: %s", str(exc).strip().splitlines()[0])
            except Exception:  # anything else: log it, try again next round
                log.exception("scheduling round failed")
            else:
                if db_down_since is not None:
                    log.warning("database reachable again after %.1f s; rounds resumed",
                                time.monotonic() - db_down_since)
                    db_down_since = None
                if res.resent:
                    self.stdout.write(f"start: resent the device tasks of {len(res.resent)} job(s) left placed "
                                      f"or profiling by a previous scheduler: {res.resent}")
                if res.placed or res.profiling or res.ready or res.failed:
                    steps = ", ".join(f"{k} {v:.3f}" for k, v in res.timings.items())
                    self.stdout.write(f"round: placed {len(res.placed)}, profiling {len(res.profiling)}, "
                                      f"ready {len(res.ready)}, failed {len(res.failed)} "
                                      f"in {time.monotonic() - t0:.3f} s ({steps})")
            done += 1
            # a decision cut short by its planning budget goes on at once (Note [Planning budget])
            stop.wait(0 if res is not None and res.deferred else interval)
        if estimates is not None:
            estimates.close()
        self.stdout.write("scheduler stopped")


def _run_id(broker: redis.Redis) -> str | None:
    """The broker Redis server's ``run_id`` (new at every server start), or None while it is unreachable."""
    try:
        return str(broker.info("server").get("run_id")) or None
    except redis.RedisError:
        return None
