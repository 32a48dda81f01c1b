"""A fact's vector is computed over its key and its content (memories.conversations.keyed_passage):
the live memories that have a key are left for the scheduled vector_sync to embed again (until
then they keep their current vector, so search finds them meanwhile)."""
from __future__ import annotations

from django.db import migrations


def forward(apps, schema_editor) -> None:  # noqa: ANN001 - Django migration API
    Memory = apps.get_model("memories", "Memory")  # noqa: N806 - historical model
    Memory.objects.using(schema_editor.connection.alias).filter(archived=False, fact_key__isnull=False) \
        .update(vector_synced=False)


class Migration(migrations.Migration):
    dependencies = [("memories", "0018_current_fact_checksum")]
    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
