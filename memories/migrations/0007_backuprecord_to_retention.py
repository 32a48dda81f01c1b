"""BackupRecord moved to the retention app (backups live there); its table stays."""
from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0006_apitoken_from_mcp_bridge"), ("retention", "0002_backuprecord_from_memories")]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="BackupRecord")]),
    ]
