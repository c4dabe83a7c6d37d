"""Jobs get their wall-clock limit, resolved at submission (time_limit_s, seconds), and whose limit it is
(time_limit_source: job, tenant or platform); null and empty for jobs stored before limits."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0006_plans_without_shifts'),
        ('jobs', '0009_delay_events_without_a_reason'),
        ('tenants', '0004_tenant_max_time_limit_s'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='time_limit_s',
            field=models.FloatField(blank=True, editable=False, help_text='Seconds its process may run (wall clock) before the agent stops it', null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='time_limit_source',
            field=models.CharField(blank=True, choices=[('job', "the job's own limit"), ('tenant', "the tenant's limit"), ('platform', "the platform's limit, ZICO_JOB_TIME_LIMIT_S")], editable=False, help_text='whose limit time_limit_s is: job, tenant or platform', max_length=8),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('time_limit_s__isnull', True), ('time_limit_s__gt', 0), _connector='OR'), name='job_time_limit_positive'),
        ),
    ]
