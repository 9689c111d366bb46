from django.db import migrations, models


def demo_orders(apps, schema_editor):
    Order = apps.get_model("complaints", "Order")
    Order.objects.bulk_create([Order(number="A-1001", amount="19.90"), Order(number="A-1002", amount="120.00")])


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.CharField(max_length=20, unique=True)),
                ("amount", models.DecimalField(decimal_places=2, max_digits=8)),
                ("status", models.CharField(default="open", max_length=20)),
            ],
        ),
        migrations.CreateModel(
            name="Complaint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("text", models.TextField()),
                ("status", models.CharField(default="new", max_length=20)),
                ("reply", models.TextField(blank=True)),
                ("request_id", models.CharField(blank=True, db_index=True, max_length=64)),
                ("handle_id", models.CharField(blank=True, max_length=200)),
                ("order", models.ForeignKey(on_delete=models.deletion.CASCADE, related_name="complaints", to="complaints.order")),
            ],
        ),
        migrations.CreateModel(
            name="Refund",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("amount", models.DecimalField(decimal_places=2, max_digits=8)),
                ("order", models.ForeignKey(on_delete=models.deletion.CASCADE, related_name="refunds", to="complaints.order")),
            ],
        ),
        migrations.RunPython(demo_orders, migrations.RunPython.noop),
    ]
