"""The state's tables, created with the store's own SQL (``SqlState.migrate``), so that
the schema is exactly the one every toolnexus store reads and writes."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def create_tables(apps: Any, schema_editor: Any) -> None:
    from toolnexus.django.state import DjangoState

    DjangoState(schema_editor.connection.alias, check=False).migrate()


def drop_tables(apps: Any, schema_editor: Any) -> None:
    from toolnexus.django.state import TABLES

    for table in TABLES:
        schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(table)}")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    initial = True
    dependencies: list[Any] = []

    operations = [
        migrations.RunPython(create_tables, drop_tables),
        migrations.CreateModel(
            name="PendingRequest",
            fields=[
                ("runtime_id", models.TextField()),
                ("request_id", models.TextField(primary_key=True, serialize=False)),
                ("handle_id", models.TextField()),
                ("status", models.TextField()),
                ("request", models.TextField()),
                ("answer", models.TextField(null=True)),
                ("created_at", models.FloatField()),
                ("closed_at", models.FloatField(null=True)),
            ],
            options={
                "verbose_name": "pending request",
                "db_table": "tn_requests",
                "ordering": ("created_at",),
                "managed": False,
            },
        ),
    ]
