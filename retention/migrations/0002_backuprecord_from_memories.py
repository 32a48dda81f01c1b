"""BackupRecord now belongs to retention; its table (backup_metadata, created by memories 0001) stays."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("retention", "0001_initial"), ("memories", "0006_apitoken_from_mcp_bridge")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="BackupRecord",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("path", models.CharField(max_length=1000, unique=True)),
                        ("size_bytes", models.BigIntegerField()),
                        ("memory_count", models.PositiveIntegerField()),
                        ("checksum", models.CharField(max_length=64)),
                        ("created_at", models.DateTimeField()),
                    ],
                    options={"db_table": "backup_metadata"},
                ),
            ],
        ),
    ]
