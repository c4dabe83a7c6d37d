"""Delay events lose ``reason``: it was one constant the worker sent with every delay report, not the
coordinator's reason, and the job page no longer shows it."""
from django.db import migrations


def drop_reason(apps, schema_editor):
    Event = apps.get_model("jobs", "Event")
    for e in Event.objects.filter(kind="delay", details__has_key="reason").only("pk", "details").iterator():
        details = dict(e.details)
        details.pop("reason", None)
        Event.objects.filter(pk=e.pk).update(details=details)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0008_identity_profiles'),
    ]

    operations = [
        migrations.RunPython(drop_reason, migrations.RunPython.noop),
    ]
