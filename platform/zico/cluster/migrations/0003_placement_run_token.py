"""Placement.run_token: a random UUID per placement that makes run_job idempotency survive a new database.

Added nullable, filled with a distinct UUID per existing row (an AddField default would give every row
the same value), then made non-null.
"""
import uuid

from django.db import migrations, models


def fill_tokens(apps, schema_editor):
    Placement = apps.get_model("cluster", "Placement")
    rows = list(Placement.objects.filter(run_token__isnull=True).only("pk"))
    for p in rows:
        p.run_token = uuid.uuid4()
    Placement.objects.bulk_update(rows, ["run_token"], batch_size=1000)


class Migration(migrations.Migration):

    dependencies = [
        ("cluster", "0002_initial"),
    ]

    operations = [
        migrations.AddField(model_name="placement", name="run_token",
                            field=models.UUIDField(null=True, editable=False)),
        migrations.RunPython(fill_tokens, migrations.RunPython.noop),
        migrations.AlterField(model_name="placement", name="run_token",
                              field=models.UUIDField(default=uuid.uuid4, editable=False)),
    ]
