"""VectorChange is renamed ChangeFeedEntry (it is the change feed of every index and of the MCP
subscriptions, not of vectors alone). Its table keeps its name (``vector_changes``), so this is a
change of Django's state only: no table or column is touched."""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0013_vectorchange_expiry")]

    operations = [migrations.RenameModel(old_name="VectorChange", new_name="ChangeFeedEntry")]
