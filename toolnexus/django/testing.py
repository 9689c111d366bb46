"""Runs in Django tests (``manage.py test``, ``TestCase``).

``TestCase`` wraps every test in a transaction on the test's thread; an inline run
shares it, so a tool sees the rows the test created and its writes roll back with the
test::

    from toolnexus.django.testing import override_runtime

    class RefundTests(TestCase):
        def test_refund(self):
            with override_runtime(generate=scripted_model()):
                response = self.client.post("/refunds/", {...})
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Iterator

from django.test import runner as django_runner

from .._team.runtime import Runtime
from . import conf


@contextlib.contextmanager
def override_runtime(**options: Any) -> Iterator[Runtime]:
    """Within the block, ``toolnexus.django.runtime()`` is a fresh runtime built from
    ``settings.TOOLNEXUS`` plus ``options`` (inline unless ``inline=False`` is given: a
    worker thread could not see the test's uncommitted rows), on a tree of its own
    (``runtime_id`` ``test-…`` unless given). It is closed afterwards (its stored tree
    too, with a state) and the previous runtime comes back."""
    options.setdefault("inline", True)
    # A tree of its own: with the state on PostgreSQL it outlives the test's transaction.
    options.setdefault("runtime_id", f"test-{uuid.uuid4().hex[:12]}")
    rt = conf.build_runtime(**options)
    previous = conf.install(rt)
    try:
        yield rt
    finally:
        conf.install(previous)
        conf.let_go(rt, close=True)


class DiscoverRunner(django_runner.DiscoverRunner):  # type: ignore[misc]  # Django ships no type hints
    """``TEST_RUNNER = "toolnexus.django.testing.DiscoverRunner"``: Django's runner, which
    first lets go of the process's runtime when it drops the test databases. With the
    state on PostgreSQL the runtime keeps connections of its own to the test database,
    and PostgreSQL refuses to drop a database that has sessions."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        conf.let_go_of_current()
        super().teardown_databases(old_config, **kwargs)
