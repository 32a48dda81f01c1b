from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("memories", "0009_curators_and_access_days"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(("archived", False)), fields=["namespace", "retention_tier"],
                               name="idx_live_ns_tier"),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(("archived", False)), fields=["created_at"], name="idx_live_created"),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(("archived", False), ("decay_eligible", True)),
                               fields=["expires_at"], name="idx_live_expiring"),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(("archived", False), ("vector_synced", False)),
                               fields=["namespace"], name="idx_live_unsynced"),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(condition=models.Q(("archived", False), ("stale", True)), fields=["namespace"],
                               name="idx_live_stale"),
        ),
    ]
