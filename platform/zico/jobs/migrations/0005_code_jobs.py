"""Jobs with code: CodeArchive (content-addressed uploads per tenant), Job.code/command/env (a job is a catalog
workload or a command in a project, never both: constraint job_catalog_or_code), JobFile (output files) and
JobLog (the stored copy of a job's output lines)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('cluster', '0004_device_gate_headroom'),
        ('jobs', '0004_job_profiling_device'),
        ('tenants', '0003_share_weight_bounds'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='JobFile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('path', models.CharField(help_text="relative POSIX path inside the job's outputs", max_length=1024)),
                ('size_bytes', models.BigIntegerField()),
                ('sha256', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['path'],
            },
        ),
        migrations.CreateModel(
            name='JobLog',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('lines', models.PositiveIntegerField(help_text='lines stored')),
                ('size_bytes', models.BigIntegerField(help_text='bytes of the stored file')),
                ('dropped_lines', models.PositiveBigIntegerField(default=0, help_text='earlier lines not kept (stream cap, size cap)')),
                ('stored_at', models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.AddField(
            model_name='job',
            name='command',
            field=models.JSONField(blank=True, default=list, help_text='argv run in the project (code jobs)'),
        ),
        migrations.AddField(
            model_name='job',
            name='env',
            field=models.JSONField(blank=True, default=dict, help_text='NAME -> value for the command (code jobs)'),
        ),
        migrations.AlterField(
            model_name='job',
            name='workload',
            field=models.CharField(blank=True, help_text='key in workers.workloads.catalog; empty for a job with code', max_length=64),
        ),
        migrations.CreateModel(
            name='CodeArchive',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sha256', models.CharField(help_text="hex digest of the archive's bytes", max_length=64)),
                ('format', models.CharField(choices=[('tar.gz', 'Tar Gz'), ('zip', 'Zip')], max_length=8)),
                ('size_bytes', models.BigIntegerField(help_text='bytes of the archive')),
                ('files', models.PositiveIntegerField(help_text='regular files in it')),
                ('unpacked_bytes', models.BigIntegerField(help_text='bytes of its files together')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='code_archives', to='tenants.tenant')),
                ('uploaded_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.AddField(
            model_name='job',
            name='code',
            field=models.ForeignKey(blank=True, help_text='the project a command job runs in', null=True, on_delete=django.db.models.deletion.RESTRICT, related_name='jobs', to='jobs.codearchive'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('code__isnull', True), models.Q(('workload', ''), _negated=True)), models.Q(('code__isnull', False), ('workload', '')), _connector='OR'), name='job_catalog_or_code'),
        ),
        migrations.AddField(
            model_name='jobfile',
            name='job',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='files', to='jobs.job'),
        ),
        migrations.AddField(
            model_name='joblog',
            name='job',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='stored_log', to='jobs.job'),
        ),
        migrations.AddConstraint(
            model_name='codearchive',
            constraint=models.UniqueConstraint(fields=('tenant', 'sha256'), name='code_archive_tenant_sha256'),
        ),
        migrations.AddConstraint(
            model_name='jobfile',
            constraint=models.UniqueConstraint(fields=('job', 'path'), name='job_file_job_path'),
        ),
    ]
