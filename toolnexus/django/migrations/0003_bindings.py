"""Schema 3: the served surfaces' bindings (``tn_bindings``: a public id, its principal, the
handle behind it), created with the store's own SQL like the rest (``SqlState.migrate``
adds the missing table and stamps the new version). Reversed, the table goes and the
stamp goes back to 2."""

from __future__ import annotations

from typing import Any

from django.db import migrations

BINDING_TABLES = ("tn_bindings",)


def create_tables(apps: Any, schema_editor: Any) -> None:
    from toolnexus.django.state import DjangoState

    DjangoState(schema_editor.connection.alias, check=False).migrate()


def drop_tables(apps: Any, schema_editor: Any) -> None:
    for table in BINDING_TABLES:
        schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(table)}")
    schema_editor.execute("UPDATE tn_meta SET value = '2' WHERE key = 'schema_version'")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    dependencies = [("toolnexus", "0002_stream_events")]

    operations = [migrations.RunPython(create_tables, drop_tables)]
