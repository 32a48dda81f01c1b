"""ApiToken moved to the memories app (tokens are not an MCP concern): the table stays, only
Django's record of which app owns it changes."""
from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("mcp_bridge", "0001_initial"), ("memories", "0006_apitoken_from_mcp_bridge")]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="ApiToken")]),
    ]
