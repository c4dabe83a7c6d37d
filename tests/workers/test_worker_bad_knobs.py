"""A device worker started with a malformed allocator knob exits at once with a message naming it, instead
of taking tasks without an allocator (Note [Malformed knobs fail the first install])."""
import uuid

from servers import start_worker, stop_process


def test_a_malformed_allocator_knob_stops_the_worker_at_start_naming_it(tmp_path):
    env = {"ZICO_HOST": f"bk{uuid.uuid4().hex[:6]}", "ZICO_BUDGET_BYTES": "8 gigs",
           "ZICO_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "ZICO_DATA_DIR": str(tmp_path / "data"),
           "REDIS_URL": "redis://127.0.0.1:1/0", "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
           "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
    proc = start_worker(["--kind", "cpu", "--capacity", "1GiB"], env, tmp_path / "worker.log")
    try:
        rc = proc.wait(timeout=120)
    finally:
        stop_process(proc)
    text = (tmp_path / "worker.log").read_text()
    assert rc == 2, text
    assert "ZICO_BUDGET_BYTES='8 gigs' is malformed; accepted:" in text and "512MiB" in text


def test_a_worker_whose_device_cannot_start_exits_instead_of_taking_tasks(tmp_path):
    import os

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    env = {"ZICO_HOST": f"bk{uuid.uuid4().hex[:6]}", "ZICO_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
           "ZICO_DATA_DIR": str(tmp_path / "data"), "REDIS_URL": url, "CELERY_BROKER_URL": url,
           "CELERY_RESULT_BACKEND": url, "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
    proc = start_worker(["--kind", "gpu", "--index", "63"], env, tmp_path / "worker.log")  # no such GPU
    try:
        rc = proc.wait(timeout=120)
    finally:
        stop_process(proc)
    text = (tmp_path / "worker.log").read_text()
    assert rc == 1 and "could not start" in text, text
