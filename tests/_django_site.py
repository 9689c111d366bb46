"""One in-process Django site for the tests that need Django in this process (settings
can be configured once per process): the toolnexus app on a SQLite file."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import django
from django.conf import settings

if not settings.configured:
    _folder = tempfile.mkdtemp(prefix="toolnexus-django-")
    atexit.register(shutil.rmtree, _folder, True)
    settings.configure(
        INSTALLED_APPS=["toolnexus.django"],
        # A file, not ":memory:": Django never closes an in-memory SQLite connection.
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(Path(_folder) / "db.sqlite3")}},
        TOOLNEXUS={"registry": "test_django_app.TEAM", "generate": "test_django_app.answer", "model": "m"},
    )
    django.setup()
