"""The stream events' tables (``tn_stream``, ``tn_stream_serials``), created with the
store's own SQL like the rest (``SqlState.migrate`` adds whatever tables are missing)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

STREAM_TABLES = ("tn_stream", "tn_stream_serials")


def create_tables(apps: Any, schema_editor: Any) -> None:
    from toolnexus.django.state import DjangoState

    DjangoState(schema_editor.connection.alias, check=False).migrate()


def drop_tables(apps: Any, schema_editor: Any) -> None:
    for table in STREAM_TABLES:
        schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(table)}")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    dependencies = [("toolnexus", "0001_initial")]

    operations = [migrations.RunPython(create_tables, drop_tables)]
