"""Settings for the example, driven by a few environment variables:

- ``EXAMPLE_DATABASE_URL``: ``postgresql://user:password@host:port/name``, or the path of a
  SQLite file (default ``db.sqlite3`` next to this project);
- ``EXAMPLE_CONN_MAX_AGE``: Django's ``CONN_MAX_AGE`` (default 0);
- ``EXAMPLE_INLINE``: ``0`` runs tools on worker threads instead of the request's thread;
- ``EXAMPLE_APPLICATION_NAME``: how PostgreSQL lists this site's sessions;
- ``EXAMPLE_RUN_TIMEOUT``: seconds a view gives one run (default 30);
- ``EXAMPLE_BASE_URL`` and ``EXAMPLE_MODEL``: a real OpenAI-compatible endpoint; without
  them a scripted in-process model answers.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "approval_site.urls"
WSGI_APPLICATION = "approval_site.wsgi.application"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "toolnexus.django",
    "complaints",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]


def _database(url: str, max_age: int) -> dict:
    if url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(url)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": max_age,
            "CONN_HEALTH_CHECKS": True,  # a kept connection the server dropped is replaced, not used
            # Names this site's sessions in pg_stat_activity.
            "OPTIONS": {"application_name": os.environ.get("EXAMPLE_APPLICATION_NAME", "django_approval")},
        }
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": url,
        "CONN_MAX_AGE": max_age,
        # IMMEDIATE: a transaction takes the write lock when it begins, so two writers
        # queue (up to "timeout" seconds) instead of one failing with "database is locked".
        "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
    }


DATABASES = {"default": _database(os.environ.get("EXAMPLE_DATABASE_URL", str(BASE_DIR / "db.sqlite3")), int(os.environ.get("EXAMPLE_CONN_MAX_AGE", "0")))}

RUN_TIMEOUT = float(os.environ.get("EXAMPLE_RUN_TIMEOUT", "30"))

TOOLNEXUS = {
    "registry": "complaints.agents.TEAM",
    "inline": os.environ.get("EXAMPLE_INLINE", "1") != "0",
}
if os.environ.get("EXAMPLE_BASE_URL"):
    TOOLNEXUS.update(base_url=os.environ["EXAMPLE_BASE_URL"], model=os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini"))
else:
    TOOLNEXUS.update(generate="complaints.agents.SCRIPTED", model="scripted")
