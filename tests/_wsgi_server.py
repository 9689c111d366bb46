"""A WSGI app served over real HTTP from a thread of the test process (the standard
library's server, one thread per request), for the tests of a served app's answers."""

from __future__ import annotations

import contextlib
import threading
from socketserver import ThreadingMixIn
from typing import Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:  # no access log on the test's stderr
        pass


@contextlib.contextmanager
def wsgi_serving(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port): yields its base URL; stopped after."""
    server = make_server("127.0.0.1", 0, app, server_class=_Threading, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
