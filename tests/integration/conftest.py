"""Fixtures for end-to-end tests: a private Redis, the real PostgreSQL test database shared with subprocesses
(or a private PostgreSQL cluster that a test may restart), the control consumer (``manage.py runconsumer``),
the scheduler (``manage.py runscheduler``) and device workers started the documented way."""
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from servers import REPO, PostgresServer, RedisServer, start_worker, stop_process


@pytest.fixture
def redis_server():
    with RedisServer() as s:
        yield s


@pytest.fixture
def stack_env(transactional_db, redis_server, tmp_path):
    """Environment for subprocesses: the test database, the private Redis, own dirs and host name."""
    db = connection.settings_dict
    host = f"it{uuid.uuid4().hex[:6]}"
    return {
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_server.url, "CELERY_BROKER_URL": redis_server.url,
        "CELERY_RESULT_BACKEND": redis_server.url, "ZICO_HOST": host,
        "ZICO_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "ZICO_DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "zico.test_settings", "PYTHONUNBUFFERED": "1",
    }


class Stack:
    """Processes of one test; each is stopped (only it, by its own handle) at teardown."""

    def __init__(self, env, tmp_path: Path):
        self.env, self.tmp = env, tmp_path
        self.procs: list[subprocess.Popen] = []

    @property
    def host(self) -> str:
        return self.env["ZICO_HOST"]

    def manage(self, *args: str, log: str) -> subprocess.Popen:
        out = open(self.tmp / log, "ab")
        proc = subprocess.Popen([sys.executable, "manage.py", *args], cwd=REPO, env={**os.environ, **self.env},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def consumer(self, lost_after_s: float = 5.0) -> subprocess.Popen:
        return self.manage("runconsumer", "--lost-after", str(lost_after_s), log="consumer.log")

    def scheduler(self, *args: str, log: str = "scheduler.log") -> subprocess.Popen:
        return self.manage("runscheduler", *args, log=log)

    def worker(self, *args: str, log: str = "worker.log") -> subprocess.Popen:
        proc = start_worker(list(args), self.env, self.tmp / log)
        self.procs.append(proc)
        return proc

    def registered_device(self, timeout: float = 120.0):
        """Wait until this stack's worker has registered its device (through the consumer); return the Device."""
        from zico.cluster.models import Device

        return wait_for(lambda: Device.objects.select_related("node").filter(node__host=self.host).first(), timeout,
                        "the worker's device registration")

    def log(self, name: str) -> str:
        path = self.tmp / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)


@pytest.fixture
def stack(stack_env, tmp_path):
    s = Stack(stack_env, tmp_path)
    yield s
    s.stop()


def wait_for(predicate, timeout: float, what: str, every: float = 0.25):
    """Poll ``predicate`` until it returns a truthy value; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@pytest.fixture
def waiter():
    return wait_for


@pytest.fixture
def tenant_owner(transactional_db):
    """A tenant ``t`` and its owner ``owner`` (the jobs' submitter in every drill)."""
    from django.contrib.auth import get_user_model

    from zico.tenants.models import Role, Tenant

    tenant = Tenant.objects.create(name="T", slug="t")
    owner = get_user_model().objects.create_user("owner")
    tenant.add_member(owner, Role.OWNER)
    return tenant, owner


@pytest.fixture
def private_postgres(transactional_db, stack_env):
    """A private PostgreSQL cluster holding a copy of the (migrated, empty) test database, used by this test's
    own ORM connection and its subprocesses (``stack_env["DATABASE_URL"]``); the test may restart it. The
    shared server is never touched beyond a ``pg_dump`` of the test database."""
    db = connection.settings_dict
    with PostgresServer() as pg:
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c",
                        "CREATE DATABASE zico"], check=True, capture_output=True)
        dump = subprocess.run(["pg_dump", "-h", db["HOST"], "-p", str(db["PORT"] or 5432), "-U", db["USER"],
                               "--no-owner", db["NAME"]], check=True, capture_output=True)
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(pg.port), "-U",
                        "postgres", "-d", "zico"], input=dump.stdout, check=True, capture_output=True)
        saved = {k: db[k] for k in ("HOST", "PORT", "NAME")}
        connection.close()
        db.update(HOST="127.0.0.1", PORT=str(pg.port), NAME="zico")
        stack_env["DATABASE_URL"] = pg.url("zico")
        try:
            yield pg
        finally:
            connection.close()
            db.update(saved)
