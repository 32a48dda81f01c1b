from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0012_memory_tags'),
    ]

    operations = [
        migrations.AlterField(
            model_name='vectorchange',
            name='op',
            field=models.CharField(choices=[('upsert', 'Upsert'), ('delete', 'Delete'), ('reset', 'Reset'), ('expiry', 'Expiry')], max_length=8),
        ),
    ]
