"""Per-namespace quotas (NamespaceQuota), tokens' write rate, and the live-memory counts per
namespace and tier the database keeps with triggers (memories/quotas/usage.py)."""
from django.db import migrations, models


def install_usage_triggers(apps, schema_editor):  # noqa: ANN001, ANN201 - Django's migration API
    from memories.quotas.usage import install_triggers

    install_triggers(schema_editor.connection)  # and counts the memories already stored


def remove_usage_triggers(apps, schema_editor):  # noqa: ANN001, ANN201
    from memories.quotas.usage import remove_triggers

    remove_triggers(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0015_feed_transaction_ids'),
    ]

    operations = [
        migrations.CreateModel(
            name='NamespaceQuota',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('namespace', models.CharField(max_length=200, unique=True)),
                ('max_memories', models.PositiveIntegerField(blank=True, null=True)),
                ('t0_budget', models.PositiveIntegerField(blank=True, null=True)),
                ('t1_budget', models.PositiveIntegerField(blank=True, null=True)),
                ('t2_budget', models.PositiveIntegerField(blank=True, null=True)),
                ('t3_budget', models.PositiveIntegerField(blank=True, null=True)),
                ('on_quota_exceeded', models.CharField(choices=[('reject', 'Reject'), ('trim', 'Trim')], default='reject', max_length=8)),
                ('updated_at', models.DateTimeField()),
                ('updated_by', models.CharField(max_length=200)),
            ],
            options={
                'db_table': 'namespace_quotas',
            },
        ),
        migrations.AddField(
            model_name='apitoken',
            name='write_rate_per_minute',
            field=models.PositiveIntegerField(blank=True, help_text='writing calls this token may make in any 60 s (empty: no limit)', null=True),
        ),
        migrations.CreateModel(
            name='NamespaceUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('namespace', models.CharField(max_length=200)),
                ('t0', models.BigIntegerField(default=0)),
                ('t1', models.BigIntegerField(default=0)),
                ('t2', models.BigIntegerField(default=0)),
                ('t3', models.BigIntegerField(default=0)),
            ],
            options={
                'db_table': 'namespace_usage',
                'indexes': [models.Index(fields=['namespace'], name='idx_namespace_usage')],
            },
        ),
        migrations.RunPython(install_usage_triggers, remove_usage_triggers),
    ]
