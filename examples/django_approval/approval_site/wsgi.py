"""WSGI entry point: ``gunicorn -w 2 --threads 4 approval_site.wsgi``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "approval_site.settings")
application = get_wsgi_application()
