"""Settings for benchmarks/django_sessions.py: the example's, with two variants that show
what the defaults prevent.

- ``BENCH_NO_HYGIENE=1``: worker threads without ``closing_connections``;
- ``BENCH_RUNTIME_PER_REQUEST=1``: also a fresh runtime for every run, closed after it,
  as ``Agent.run(...)`` in a view does (worker threads that end holding connections).
"""

import os
from typing import Any

import toolnexus.django as integration
from approval_site.settings import *  # noqa: F401,F403
from approval_site.settings import TOOLNEXUS

if os.environ.get("BENCH_NO_HYGIENE") == "1":
    TOOLNEXUS["around_tool"] = None

if os.environ.get("BENCH_RUNTIME_PER_REQUEST") == "1":

    class _RuntimePerRun:
        def run_agent(self, name: str, prompt: str, **options: Any) -> Any:
            rt = integration.build_runtime()
            try:
                return rt.run_agent(name, prompt, **options)
            finally:
                rt.close(rt.root)

    integration.runtime = _RuntimePerRun  # the views look it up when they are imported, after this
