"""Settings for benchmarks/django_sessions.py: the example's, optionally without the
worker-thread connection hygiene (to show what it prevents)."""

import os

from approval_site.settings import *  # noqa: F401,F403
from approval_site.settings import TOOLNEXUS

if os.environ.get("BENCH_NO_HYGIENE") == "1":
    TOOLNEXUS["around_tool"] = None
