"""Settings for the example, driven by a few environment variables:

- ``EXAMPLE_DATABASE_URL``: ``postgresql://user:password@host:port/name``, or the path of a
  SQLite file (default ``toolnexus-django-approval.sqlite3`` in the system's temporary
  folder, so that trying the example leaves nothing in the checkout);
- ``EXAMPLE_CONN_MAX_AGE``: Django's ``CONN_MAX_AGE`` (default 0);
- ``EXAMPLE_INLINE``: ``0`` runs tools on worker threads instead of the request's thread;
- ``EXAMPLE_STATE``: ``memory`` keeps the runs in each process's memory instead of the
  database (inline only; an answer must then reach the process that asked);
- ``EXAMPLE_APPLICATION_NAME``: how PostgreSQL lists this site's sessions;
- ``EXAMPLE_RUN_TIMEOUT``: seconds a view gives one run (default 30);
- ``EXAMPLE_APPROVAL_TTL``: seconds an approval request stays open before it expires
  (default one day; ``manage.py toolnexus_expire`` or the admin's list answers it then);
- ``EXAMPLE_BASE_URL`` and ``EXAMPLE_MODEL``: a real OpenAI-compatible endpoint; without
  them a scripted in-process model answers.
"""

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "approval_site.urls"
WSGI_APPLICATION = "approval_site.wsgi.application"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "toolnexus.django",
    "complaints",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"


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


SQLITE_FILE = Path(tempfile.gettempdir()) / "toolnexus-django-approval.sqlite3"
DATABASES = {
    "default": _database(
        os.environ.get("EXAMPLE_DATABASE_URL", str(SQLITE_FILE)), int(os.environ.get("EXAMPLE_CONN_MAX_AGE", "0"))
    )
}

# Lets go of the runtime (and the state's own PostgreSQL connections) before the test
# database is dropped.
TEST_RUNNER = "toolnexus.django.testing.DiscoverRunner"

RUN_TIMEOUT = float(os.environ.get("EXAMPLE_RUN_TIMEOUT", "30"))
APPROVAL_TTL = float(os.environ.get("EXAMPLE_APPROVAL_TTL", str(24 * 3600)))

INLINE = os.environ.get("EXAMPLE_INLINE", "1") != "0"
TOOLNEXUS = {"registry": "complaints.agents.TEAM", "inline": INLINE}
if INLINE and os.environ.get("EXAMPLE_STATE", "django") == "django":
    # The runs live in DATABASES["default"] (the toolnexus app's tables), inside each
    # view's transaction: any worker process answers an approval another one asked, and
    # a restart loses nothing. (Worker threads could not write the state while the view's
    # transaction holds its locks, so without inline the runs stay in memory.)
    TOOLNEXUS["state"] = "django"
if os.environ.get("EXAMPLE_BASE_URL"):
    TOOLNEXUS.update(base_url=os.environ["EXAMPLE_BASE_URL"], model=os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini"))
else:
    TOOLNEXUS.update(generate="complaints.agents.SCRIPTED", model="scripted")
