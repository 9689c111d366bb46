from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("complaints", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="complaint",
            name="owner",
            field=models.ForeignKey(
                null=True, on_delete=models.deletion.CASCADE, related_name="complaints", to=settings.AUTH_USER_MODEL
            ),
        ),
    ]
