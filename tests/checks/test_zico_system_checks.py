"""Zico's system checks fire with their stable ids on bad configuration and stay quiet on good."""
import pytest
from django.core import checks
from django.test import override_settings

from zico import checks as zico_checks


def ids(**tags_kw):
    return {m.id for m in checks.run_checks(**tags_kw) if m.id and m.id.startswith("zico.")}


def test_the_test_configuration_is_clean():
    assert ids() == set()


@pytest.mark.parametrize("overrides,expected", [
    ({"CELERY_BROKER_URL": "", "CELERY_TASK_ALWAYS_EAGER": False}, "zico.E001"),
    ({"CELERY_BROKER_URL": "amqp://guest@rabbit//"}, "zico.E002"),
    ({"ZICO_HOST": "gpu.box"}, "zico.E003"),
    ({"REDIS_URL": "memcached://x"}, "zico.W003"),
])
def test_bad_settings_raise_their_check(overrides, expected):
    with override_settings(**overrides):
        assert ids() == {expected}


def test_an_eager_setup_needs_no_broker():
    with override_settings(CELERY_BROKER_URL="", CELERY_TASK_ALWAYS_EAGER=True):
        assert "zico.E001" not in ids()


def test_unusable_data_and_checkpoint_dirs_warn(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    with override_settings(ZICO_DATA_DIR=a_file, ZICO_CHECKPOINT_DIR=a_file / "ckpt"):
        assert ids() == {"zico.W001", "zico.W002"}
    with override_settings(ZICO_DATA_DIR=tmp_path / "missing", ZICO_CHECKPOINT_DIR=tmp_path / "new" / "ckpt"):
        assert ids() == set()  # missing but creatable is fine


def test_sqlite_without_debug_is_a_deploy_only_warning(settings):
    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3"}}
    postgres = {"default": {"ENGINE": "django.db.backends.postgresql"}}
    assert [w.id for w in zico_checks.sqlite_in_production(False, sqlite)] == ["zico.W004"]
    assert zico_checks.sqlite_in_production(True, sqlite) == []
    assert zico_checks.sqlite_in_production(False, postgres) == []
    assert zico_checks.check_sqlite_in_production in checks.registry.registry.get_checks(include_deployment_checks=True)
    assert zico_checks.check_sqlite_in_production not in checks.registry.registry.get_checks()
