"""ApiToken now belongs to memories; its table (api_tokens, created by mcp_bridge 0001) stays."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memories", "0005_plural_names"), ("mcp_bridge", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100)),
                        ("token_hash", models.CharField(editable=False, max_length=64, unique=True)),
                        ("prefix", models.CharField(editable=False, help_text="first characters, to recognise the token", max_length=12)),
                        ("namespaces", models.JSONField(default=list, help_text="namespaces this token may read and write")),
                        ("read_only", models.BooleanField(default=False)),
                        ("revoked", models.BooleanField(default=False)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={"db_table": "api_tokens"},
                ),
            ],
        ),
    ]
