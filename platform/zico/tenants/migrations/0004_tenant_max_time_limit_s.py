"""Tenants get max_time_limit_s: the longest one of their jobs may run, wall clock (seconds; null: no tenant limit)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0003_share_weight_bounds'),
    ]

    operations = [
        migrations.AddField(
            model_name='tenant',
            name='max_time_limit_s',
            field=models.PositiveIntegerField(blank=True, help_text='Seconds; the longest one of its jobs may run (wall clock). Empty = no tenant limit.', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddConstraint(
            model_name='tenant',
            constraint=models.CheckConstraint(condition=models.Q(('max_time_limit_s__isnull', True), ('max_time_limit_s__gt', 0), _connector='OR'), name='tenant_time_limit_positive'),
        ),
    ]
