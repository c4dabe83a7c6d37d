"""Device.gate_headroom: owned by the row (a worker's --gate-headroom only seeds a new one), default 0.10 (the
one planning rule, placement.gating: curves now carry their own pool overhead); rows at the old default 0.15
move to the new one."""
from django.db import migrations, models

OLD_DEFAULT, NEW_DEFAULT = 0.15, 0.10


def to_new_default(apps, schema_editor):
    apps.get_model("cluster", "Device").objects.filter(gate_headroom=OLD_DEFAULT).update(gate_headroom=NEW_DEFAULT)


def to_old_default(apps, schema_editor):
    apps.get_model("cluster", "Device").objects.filter(gate_headroom=NEW_DEFAULT).update(gate_headroom=OLD_DEFAULT)


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0004_device_gate_headroom'),
    ]

    operations = [
        migrations.AlterField(
            model_name='device',
            name='gate_headroom',
            field=models.FloatField(default=0.1, help_text="share of the budget its worker's coordinator leaves free (the worker's --gate-headroom seeds a new row; the worker reads it from here); the scheduler plans groups against the rest"),
        ),
        migrations.RunPython(to_new_default, to_old_default),
    ]
