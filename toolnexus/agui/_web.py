"""The AG-UI endpoint as a Flask blueprint and as a Django view, on the served layer
(CONTRACT §20): who asks first (``authorize=``, or ``public=True``), a JSON body of at most
``max_body`` bytes, the input checked, then one of the process's ``max_streams`` streams
(``503`` with ``Retry-After`` past it), and only then the run. A refusal is its status with
JSON ``{"error": reason}``; nothing of a refused request starts.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable

from .._serve import Access, Held, Refused, StreamSlots
from .._serve.bodies import MAX_BODY, check_limit
from .._serve.slots import MAX_STREAMS
from ..errors import AGUIInputError, ConfigError
from ._calls import HEADERS, frames, prepare
from ._thread import start

if TYPE_CHECKING:
    from .._team.runtime import Runtime

#: Where a blueprint's endpoint is, unless told otherwise.
URL = "/agui"


class Endpoint:
    """One AG-UI endpoint: its access rule, its runtime (one per process) and its streams."""

    def __init__(
        self,
        runtime: Runtime | Callable[[], Runtime],
        *,
        agent: str,
        authorize: Any,
        public: bool,
        max_streams: int | None,
        max_body: int,
        heartbeat_s: float,
        what: str,
    ) -> None:
        if not isinstance(agent, str) or not agent:
            raise ConfigError(f"{what}: agent= names the agent a thread runs")
        self.access = Access.build(authorize, public, what=what)
        self.agent = agent
        self.max_body = check_limit(max_body, "max_body")
        self.heartbeat_s = heartbeat_s
        self._max_streams = max_streams if max_streams is None else StreamSlots(max_streams).limit
        self._runtime = runtime
        self._lock = threading.Lock()  # guards: _built, _slots
        self._built: tuple[int, Runtime] | None = None
        self._slots: StreamSlots | None = None

    def runtime(self) -> Runtime:
        """The runtime: the one given, or the factory's, built once in each process."""
        from .._team.runtime import Runtime

        if isinstance(self._runtime, Runtime):
            return self._runtime
        with self._lock:
            if self._built is None or self._built[0] != os.getpid():  # a forked worker builds its own
                self._built = (os.getpid(), self._runtime())
            return self._built[1]

    def slots(self, configured: int | None) -> StreamSlots:
        """This process's open streams of the endpoint (``max_streams=``, else the app's
        ``TOOLNEXUS_MAX_STREAMS``, else 2)."""
        with self._lock:
            if self._slots is None:
                limit = self._max_streams if self._max_streams is not None else configured
                self._slots = StreamSlots(limit if limit is not None else MAX_STREAMS)
            return self._slots

    def run(self, principal: str, body: Any, configured_streams: int | None) -> Held:
        """Check the input, take a stream, start the run: its frames, holding the stream.

        Raises:
            AGUIInputError: the input was refused.
            Refused: ``503``, the process has ``max_streams`` streams open.
        """

        made = prepare(self.runtime(), body, agent=self.agent, principal=principal)
        slot = self.slots(configured_streams).take()
        try:
            return Held(frames(start(made), self.heartbeat_s), slot)
        except BaseException:
            slot.release()
            raise


def blueprint(
    runtime: Runtime | Callable[[], Runtime],
    *,
    agent: str,
    url: str = URL,
    name: str = "toolnexus_agui",
    authorize: Callable[..., Any] | None = None,
    public: bool = False,
    max_streams: int | None = None,
    max_body: int = MAX_BODY,
    heartbeat_s: float = 15,
) -> Any:
    """A Flask blueprint with ``POST <url>``: one AG-UI run of ``agent``'s thread per request.

    Args:
        runtime: a ``Runtime``, or a function of no arguments that builds one (called once
            in each process, after a server such as gunicorn forked).
        agent: the agent a new thread runs.
        url: where the endpoint is.
        name: the blueprint's name.
        authorize: called inside every request (``flask.request`` current; given it too,
            unless it takes no argument): the caller's principal, a non-empty ``str``, or a
            falsy value to refuse (``401``); it may ``flask.abort(401|403)`` itself.
        public: instead of ``authorize``: anyone who can reach the app can start, read and
            answer every thread.
        max_streams: open streams per process (default: the app's ``TOOLNEXUS_MAX_STREAMS``,
            else 2); one more is ``503`` with ``Retry-After``.
        max_body: the largest body read, in bytes (``413`` past it).
        heartbeat_s: seconds of silence before a ``: keep-alive`` comment.

    Raises:
        ConfigError: neither ``authorize=`` nor ``public=True`` (or both).
    """
    import flask

    from .._serve import for_flask

    endpoint = Endpoint(
        runtime, agent=agent, authorize=authorize, public=public, max_streams=max_streams, max_body=max_body,
        heartbeat_s=heartbeat_s, what=f"the AG-UI endpoint {url}",
    )

    def run() -> flask.Response:
        principal = for_flask.principal(endpoint.access)
        body = for_flask.read_json(limit=endpoint.max_body, what="a RunAgentInput")
        configured = flask.current_app.config.get("TOOLNEXUS_MAX_STREAMS")
        return flask.Response(endpoint.run(principal, body, configured), headers=HEADERS)

    def refused(exc: AGUIInputError) -> flask.Response:
        return for_flask.refusal(Refused(exc.status, exc.reason))

    routes = flask.Blueprint(name, __name__)
    routes.add_url_rule(url, "run", run, methods=["POST"])
    routes.register_error_handler(Refused, for_flask.refusal)
    routes.register_error_handler(AGUIInputError, refused)
    return routes


def django_view(
    runtime: Runtime | Callable[[], Runtime],
    *,
    agent: str,
    authorize: Callable[..., Any] | None = None,
    public: bool = False,
    max_streams: int | None = None,
    max_body: int = MAX_BODY,
    heartbeat_s: float = 15,
) -> Callable[[Any], Any]:
    """A Django view (CSRF-exempt: a JSON body cannot be posted cross-site without a CORS
    preflight) answering ``POST`` with one AG-UI run of ``agent``'s thread.

    The arguments are ``blueprint``'s; ``authorize`` is given the ``HttpRequest`` (it may
    raise ``PermissionDenied`` itself), and ``max_streams`` defaults to the setting
    ``TOOLNEXUS_MAX_STREAMS``, else 2.

    Raises:
        ConfigError: neither ``authorize=`` nor ``public=True`` (or both).
    """
    from django.http import JsonResponse, StreamingHttpResponse
    from django.views.decorators.csrf import csrf_exempt

    from .._serve import for_django

    endpoint = Endpoint(
        runtime, agent=agent, authorize=authorize, public=public, max_streams=max_streams, max_body=max_body,
        heartbeat_s=heartbeat_s, what="the AG-UI view",
    )

    def view(request: Any) -> Any:
        from django.conf import settings

        if request.method != "POST":
            return JsonResponse({"error": "POST a RunAgentInput"}, status=405, headers={"Allow": "POST"})
        try:
            principal = for_django.principal(endpoint.access, request)
            body = for_django.read_json(request, limit=endpoint.max_body, what="a RunAgentInput")
            held = endpoint.run(principal, body, getattr(settings, "TOOLNEXUS_MAX_STREAMS", None))
        except Refused as refused:
            return for_django.refusal(refused)
        except AGUIInputError as exc:
            return for_django.refusal(Refused(exc.status, exc.reason))
        return StreamingHttpResponse(held, headers=HEADERS)

    exempt: Callable[[Any], Any] = csrf_exempt(view)
    return exempt
