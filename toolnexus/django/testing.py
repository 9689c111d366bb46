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
from typing import Any, Iterator

from ..runtime import Runtime
from . import conf


@contextlib.contextmanager
def override_runtime(**options: Any) -> Iterator[Runtime]:
    """Within the block, ``toolnexus.django.runtime()`` is a fresh runtime built from
    ``settings.TOOLNEXUS`` plus ``options`` (inline unless ``inline=False`` is given: a
    worker thread could not see the test's uncommitted rows). It is closed afterwards and
    the previous runtime comes back."""
    options.setdefault("inline", True)
    rt = conf.build_runtime(**options)
    previous = conf.install(rt)
    try:
        yield rt
    finally:
        conf.install(previous)
        rt.close(rt.root)
