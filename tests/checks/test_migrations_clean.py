"""The models and the committed migrations agree: makemigrations --check finds nothing to write."""
from django.core.management import call_command


def test_makemigrations_check_reports_no_changes(db, capsys):
    call_command("makemigrations", "--check", "--dry-run")  # SystemExit(1) on pending changes
    assert "No changes detected" in capsys.readouterr().out
