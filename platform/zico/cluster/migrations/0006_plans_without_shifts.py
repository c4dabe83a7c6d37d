"""Stored sharing plans lose ``shifts_s``: the shift search's offsets were stored and shown but read by nobody (the
worker's coordinator finds each delay live); SharingPlan.to_dict no longer writes them."""
from django.db import migrations


def drop_shifts(apps, schema_editor):
    Placement = apps.get_model("cluster", "Placement")
    for p in Placement.objects.filter(plan__has_key="shifts_s").only("pk", "plan").iterator():
        plan = dict(p.plan)
        plan.pop("shifts_s", None)
        Placement.objects.filter(pk=p.pk).update(plan=plan)


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0005_device_gate_headroom_owned_by_the_row'),
    ]

    operations = [
        migrations.RunPython(drop_shifts, migrations.RunPython.noop),
    ]
