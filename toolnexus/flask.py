"""Flask, first-class (extra ``toolnexus[flask]``): one runtime per process from the app's
config, and the routes every team app writes.

    app = Flask(__name__)
    app.config.update(TOOLNEXUS_REGISTRY="myapp.team:TEAM", TOOLNEXUS_ENTRY="support",
                      TOOLNEXUS_STATE="runs.db", TOOLNEXUS_BASE_URL="http://localhost:11434/v1",
                      TOOLNEXUS_MODEL="llama3.1")
    tn = Toolnexus(app, authorize=lambda: flask.session.get("user"))   # or Toolnexus(...).init_app(app)

Every ``Runtime`` keyword is read from ``TOOLNEXUS_<KEYWORD>`` (``TOOLNEXUS_STATE``,
``TOOLNEXUS_BASE_URL``, ``TOOLNEXUS_TIMEOUT`` in seconds...), a value given to ``Toolnexus(...)``
winning over the config; ``registry``, ``generate``, ``hooks`` and the other callables may
be ``"module:attribute"`` strings. ``TOOLNEXUS_ENTRY`` names the agent a run starts when
the request names none. The runtime is built on first use in each process (after a
server such as gunicorn has forked) and let go of at exit: with a state, the runs stay in
it for the other workers and for a restart.

The blueprint's routes (``url_prefix``, default ``/runs``) follow the served layer's rules
(CONTRACT §20, ``toolnexus._serve``):

- **Closed by default.** ``authorize`` is called inside every request (``flask.request``
  current; it is given the request too, unless it takes no argument) and returns the
  caller's principal, a non-empty ``str`` (``True``: one shared principal), or ``None`` to
  refuse (``401``); it may ``flask.abort(401|403)`` itself. Without ``authorize=`` the
  routes refuse to register unless ``public=True``: anyone who can reach the app can start,
  read and answer every run.
- **Runs belong to their principal.** A run id is random (128 bits, URL-safe), bound to the
  principal that started it in the runtime's state (every worker agrees); another
  principal gets ``404`` on every route, as for a run that does not exist.
- **Bodies are JSON**: ``Content-Type: application/json`` or ``415``; at most
  ``TOOLNEXUS_MAX_BODY`` bytes (default 1 MiB) or ``413``; nothing starts otherwise.
- **Streams are capped and end**: at most ``max_streams`` (``TOOLNEXUS_MAX_STREAMS``,
  default 2) event streams per process, one more is ``503`` with ``Retry-After``; a stream
  ends when its run waits on a person or has finished (§16), and the page comes back with
  ``Last-Event-ID`` after its answer.

The routes:

- ``POST /runs`` ``{"prompt": "...", "agent"?: "..."}`` starts a run: ``202 {"run",
  "status": "running", "url", "events"}`` (with ``?wait=S``: up to S seconds for its
  first result, then as ``GET``).
- ``GET /runs/<run>?wait=S``: ``200 {"run", "state", "status", "result", "pending"?,
  "tree"}`` once it has settled or asks for an answer, ``202 {"status": "running", "tree"}``
  until then (an inline runtime runs the turn in the request, to its end).
- ``POST /runs/<run>/answer`` with an ``Answer`` (``{"id", "ok", "data"?, "reason"?}``):
  ``202`` while the run goes on (``200`` with its result inline); ``404`` no such run;
  ``409`` when it waits for no answer, for another one, or another worker's answer won
  (exactly one answer wins, across processes); ``400`` for a body that is not an Answer
  (malformed, ``NaN``, nested deeper than 64 levels), never ``500``.
- ``GET /runs/<run>/events``: the run's events as Server-Sent Events (``toolnexus.sse``),
  from ``Last-Event-ID`` (or ``?after=``) when a browser reconnects, on any worker, until the
  run's result or until it rests; ``400`` for an id that is not one (never ``500``, never a
  stream that is cut).
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import threading
from typing import Any, Callable, Iterator

import flask

from . import _seconds as seconds
from . import sse
from ._serve import Access, Held, Refused, StreamSlots, bindings_of, not_found
from ._serve import for_flask
from ._serve.bodies import MAX_BODY, check_limit
from ._serve.slots import MAX_STREAMS
from ._team.level1 import Agent
from .data import AgentResult, Answer, HandleView
from .errors import HandleClosed, SpawnError, StateError, ToolnexusError, UnknownHandle, UnknownRequest, WireError
from ._team.runtime import Runtime
from ._events.cursor import parse_after
from .wire import from_wire, to_wire

__all__ = ["Toolnexus", "blueprint"]

#: Option names whose value may be an import path (``"module:attribute"``).
IMPORTABLE = (
    "registry",
    "generate",
    "hooks",
    "on_metric",
    "around_tool",
    "clock",
    "store",
    "session",
    "dispatcher",
    "pool",
)
#: The longest ``?wait=`` a request may ask for, unless ``TOOLNEXUS_MAX_WAIT_S`` says otherwise.
MAX_WAIT_S = 30.0
#: The surface name of the blueprint's runs in the runtime's bindings.
SURFACE = "flask"


def _keywords() -> set[str]:
    """``Runtime``'s keywords, and the older names of its durations (which still work, with
    a ``DeprecationWarning``)."""
    parameters = inspect.signature(Runtime).parameters
    named = {name for name, parameter in parameters.items() if parameter.kind is not inspect.Parameter.VAR_KEYWORD}
    return (named - {"self", "registry"}) | {old for old, (new, _) in seconds.RENAMED.items() if new in named}


def imported(value: Any) -> Any:
    """``"module:attribute"`` (or ``"module.attribute"``) as the object it names; anything else as it is."""
    if not isinstance(value, str):
        return value
    module, colon, name = value.partition(":")
    if not colon:
        module, _, name = value.rpartition(".")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


class Toolnexus:
    """The extension: ``Toolnexus(app, authorize=fn)`` or ``Toolnexus(authorize=fn)`` then
    ``init_app(app)``.

    ``authorize`` (called inside every request of the routes) returns the caller's
    principal or ``None`` (``401``); ``public=True`` opens the routes instead: anyone who can
    reach the app can start, read and answer every run. ``max_streams`` (default: config
    ``TOOLNEXUS_MAX_STREAMS``, else 2) caps the open event streams of each process.
    ``registry`` and ``runtime_options`` override the app's ``TOOLNEXUS_*`` config;
    ``runtime_factory`` (called once per process) builds the runtime instead, for an app
    that shares its construction with other processes (Celery workers, say); ``entry`` is
    the agent a run starts by default; ``url_prefix`` (``None``: no routes, and then no
    ``authorize`` needed) is where the blueprint's routes go.
    """

    def __init__(
        self,
        app: flask.Flask | None = None,
        *,
        registry: Any = None,
        entry: str | None = None,
        url_prefix: str | None = "/runs",
        runtime_factory: Callable[[], Runtime] | None = None,
        authorize: Callable[..., Any] | None = None,
        public: bool = False,
        max_streams: int | None = None,
        **runtime_options: Any,
    ) -> None:
        unknown = sorted(set(runtime_options) - _keywords())
        if unknown:
            raise ToolnexusError(
                f"Toolnexus: unknown option(s) {', '.join(unknown)}; the options are Runtime's keywords"
            )
        self._registry = registry
        self._factory = runtime_factory
        self._entry = entry
        self._url_prefix = url_prefix
        self._options = runtime_options
        self._authorize = authorize
        self._public = public
        self._max_streams = max_streams
        #: Who may use the routes (set by ``init_app``; ``None``: every route answers 401).
        self.access: Access | None = None
        self._lock = threading.Lock()  # guards: _runtimes (held while a runtime is built), _slots
        self._runtimes: dict[int, tuple[int, Runtime]] = {}  # id(app) -> (pid, its runtime)
        self._slots: dict[int, StreamSlots] = {}  # id(app) -> its open streams (counted per process)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Register the extension (and its routes, unless ``url_prefix=None``) on ``app``.

        Raises:
            ConfigError: routes with neither ``authorize=`` nor ``public=True``; a bad
                ``max_streams`` or ``TOOLNEXUS_MAX_BODY``.
        """
        if self._url_prefix is not None:
            self.access = Access.build(self._authorize, self._public, what="the toolnexus routes")
            self.max_body(app)
            self.slots(app)
        app.extensions["toolnexus"] = self
        if self._url_prefix is not None:
            app.register_blueprint(blueprint(), url_prefix=self._url_prefix)
        atexit.register(self._let_go_all)

    # --- the process's runtime ------------------------------------------------------------

    def runtime(self, app: flask.Flask | None = None) -> Runtime:
        """This process's runtime for ``app`` (the current app by default), built on first use."""
        app = app or flask.current_app._get_current_object()  # type: ignore[attr-defined]
        with self._lock:
            held = self._runtimes.get(id(app))
            if held is None or held[0] != os.getpid():  # a forked child builds its own
                held = self._runtimes[id(app)] = (os.getpid(), self._build(app))
            return held[1]

    def entry(self, app: flask.Flask) -> str | None:
        return self._entry or app.config.get("TOOLNEXUS_ENTRY")

    def max_wait(self, app: flask.Flask) -> float:
        return float(app.config.get("TOOLNEXUS_MAX_WAIT_S", MAX_WAIT_S))

    def max_body(self, app: flask.Flask) -> int:
        """The largest request body the routes read (``TOOLNEXUS_MAX_BODY``, default 1 MiB)."""
        return check_limit(app.config.get("TOOLNEXUS_MAX_BODY", MAX_BODY), "TOOLNEXUS_MAX_BODY")

    def slots(self, app: flask.Flask) -> StreamSlots:
        """``app``'s open event streams in this process (``max_streams``)."""
        with self._lock:
            found = self._slots.get(id(app))
            if found is None:
                limit = self._max_streams
                if limit is None:
                    limit = app.config.get("TOOLNEXUS_MAX_STREAMS", MAX_STREAMS)
                found = self._slots[id(app)] = StreamSlots(limit)
            return found

    def _build(self, app: flask.Flask) -> Runtime:
        if self._factory is not None:
            return self._factory()
        options = {
            key: app.config[f"TOOLNEXUS_{key.upper()}"]
            for key in _keywords()
            if f"TOOLNEXUS_{key.upper()}" in app.config
        }
        options.update(self._options)
        for key in IMPORTABLE:
            if key in options:
                options[key] = imported(options[key])
        registry = imported(self._registry if self._registry is not None else app.config.get("TOOLNEXUS_REGISTRY"))
        if isinstance(registry, Agent):
            registry = registry.registry
        if not registry:
            raise ToolnexusError(
                "Toolnexus: no registry: pass registry= or set "
                "TOOLNEXUS_REGISTRY (a mapping, an Agent, or 'module:attribute')"
            )
        return Runtime(registry, **options)

    def let_go(self, app: flask.Flask | None = None) -> None:
        """Let go of this process's runtime (a stored tree stays for the other processes; a
        memory-only one closes); the next use builds a new one."""
        app = app or flask.current_app._get_current_object()  # type: ignore[attr-defined]
        with self._lock:
            held = self._runtimes.pop(id(app), None)
        if held is not None and held[0] == os.getpid():
            held[1].release()

    def _let_go_all(self) -> None:
        with self._lock:
            held, self._runtimes = list(self._runtimes.values()), {}
        for pid, rt in held:
            if pid == os.getpid():
                rt.release()


# --- the routes ------------------------------------------------------------------------------


def _ext() -> Toolnexus:
    found = flask.current_app.extensions.get("toolnexus")
    if not isinstance(found, Toolnexus):
        raise ToolnexusError("the toolnexus blueprint needs the Toolnexus extension on the app")
    return found


def _rt() -> Runtime:
    return _ext().runtime()


def _problem(status: int, message: str, **more: Any) -> flask.Response:
    response = flask.jsonify({"error": message, **more})
    response.status_code = status
    return response


def _principal() -> str:
    """Who asks, before anything else of the request is served (``401`` when refused)."""
    access = _ext().access
    if access is None:
        raise Refused(401, "the toolnexus routes are closed: register them with Toolnexus(app, authorize=...)")
    return for_flask.principal(access)


def _handle_of(run: str, principal: str) -> str:
    """The handle behind ``principal``'s run ``run``: ``404`` for a run that does not exist
    and, the same, for another principal's."""
    found = bindings_of(_rt()).get(SURFACE, principal, run)
    if found is None:
        raise not_found(f"run {run[:40]!r}")
    return found.handle


def _body(what: str) -> Any:
    return for_flask.read_json(limit=_ext().max_body(flask.current_app), what=what)


def _wait_s() -> float | None:
    raw = flask.request.args.get("wait")
    if raw is None:
        return None
    try:
        wait = float(raw)
    except ValueError:
        raise WireError(f"wait must be a number of seconds, not {raw[:20]!r}") from None
    if not 0 <= wait < float("inf"):
        raise WireError("wait must be a number of seconds, 0 or more")
    return min(wait, _ext().max_wait(flask.current_app))


def _view(run: str, handle: str, result: AgentResult | None, state: str) -> flask.Response:
    """A run as JSON: ``200`` once it settled or asks for an answer, ``202`` while it runs;
    ``tree`` lists its handles (``HandleView``), parents first."""
    settled = result is not None and result.status != "timeout"
    body: dict[str, Any] = {
        "run": run,
        "state": state,
        "status": result.status if settled and result is not None else "running",
    }
    body["tree"] = [to_wire(view) for view in _subtree(_rt(), handle)]
    if settled and result is not None:
        body["result"] = to_wire(result)
        if result.pending is not None:
            body["pending"] = to_wire(result.pending)
    response = flask.jsonify(body)
    response.status_code = 200 if settled else 202
    if not settled:
        response.headers["Location"] = flask.url_for(".show", run=run)
    return response


def _subtree(rt: Runtime, handle_id: str) -> list[HandleView]:
    view = rt.inspect(handle_id)
    return [view] + [each for child in view.children for each in _subtree(rt, child)]


def start() -> flask.Response:
    """``POST /runs``: spawn the agent under the root, bind it to the caller under a random
    run id, wake it on the prompt, answer 202."""
    principal = _principal()
    body = _body("a run")
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        return _problem(400, 'send JSON {"prompt": "..."} (and "agent": NAME to pick one)')
    agent = body.get("agent") or _ext().entry(flask.current_app)
    if not isinstance(agent, str):
        return _problem(400, 'name the agent to run: "agent" in the body, or TOOLNEXUS_ENTRY')
    rt = _rt()
    try:
        rt.definition(agent)
    except SpawnError as exc:
        return _problem(400, str(exc))
    wait = _wait_s()
    handle = rt.spawn(rt.root, agent)
    try:
        bound = bindings_of(rt).bind(SURFACE, principal, handle.id)
    except BaseException:
        rt.close(handle, force=True)  # a run nobody could reach: not started
        raise
    assert bound is not None  # a random id is never taken
    run = bound.id
    rt.wake(handle, prompt)
    if wait is not None:
        return _show(run, handle.id)
    response = flask.jsonify(
        {
            "run": run,
            "status": "running",
            "url": flask.url_for(".show", run=run),
            "events": flask.url_for(".events", run=run),
        }
    )
    response.status_code = 202
    response.headers["Location"] = flask.url_for(".show", run=run)
    return response


def show(run: str) -> flask.Response:
    """``GET /runs/<run>?wait=S``: the run's latest result (waiting up to S seconds for one)."""
    return _show(run, _handle_of(run, _principal()))


def _show(run: str, handle: str) -> flask.Response:
    rt = _rt()
    state = rt.inspect(handle).state
    # Inline, the request runs the turn itself: to its end (a timeout would interrupt it).
    result = rt.wait(handle) if rt.inline and state == "running" else rt.wait(handle, timeout=_wait_s() or 0)
    return _view(run, handle, result, rt.inspect(handle).state)


def answer(run: str) -> flask.Response:
    """``POST /runs/<run>/answer``: resume the run if the answer is for its pending request."""
    handle = _handle_of(run, _principal())
    given = from_wire(Answer, _body("an Answer"))
    rt = _rt()
    pending = rt.inspect(handle).pending
    if pending is None:
        return _problem(409, f"run {run} is not waiting for an answer", state=rt.inspect(handle).state)
    if given.id != pending.id:
        return _problem(
            409, f"answer {given.id!r} does not match the pending request {pending.id!r}", pending=to_wire(pending)
        )
    rt.resume(given)  # exactly one resume per request wins, across processes
    if rt.inline:  # nobody else will run the continuation: this request does
        return _view(run, handle, rt.wait(handle), rt.inspect(handle).state)
    response = flask.jsonify({"run": run, "status": "running", "events": flask.url_for(".events", run=run)})
    response.status_code = 202
    return response


def events(run: str) -> flask.Response:
    """``GET /runs/<run>/events``: the run's events as SSE, after ``Last-Event-ID``, until
    the run's result or until it rests; one of the process's ``max_streams``."""
    handle = _handle_of(run, _principal())
    after = flask.request.headers.get("Last-Event-ID") or flask.request.args.get("after") or None
    parse_after(after)  # 400 before anything is streamed
    rt = _rt()
    rt.inspect(handle)  # a run pruned meanwhile is a 404 before the stream starts
    app = flask.current_app
    config = app.config
    slot = _ext().slots(app).take()  # 503 with Retry-After when the process has enough open
    try:
        frames = sse.stream(rt, handle, last_event_id=after, heartbeat_s=float(config.get("TOOLNEXUS_HEARTBEAT_S", 15)))
        body = Held(_reconnecting(int(config.get("TOOLNEXUS_SSE_RETRY_MS", 1000)), frames), slot)
    except BaseException:
        slot.release()
        raise
    return flask.Response(body, headers=sse.HEADERS)


def _reconnecting(retry_ms: int, frames: Iterator[bytes]) -> Iterator[bytes]:
    """The frames after a ``retry:`` field: how soon a browser reconnects if the stream
    drops (a page closes its ``EventSource`` when the run waits on it, or is over)."""
    try:
        yield f"retry: {retry_ms}\n\n".encode()
        yield from frames
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()


def _refused(exc: ToolnexusError) -> flask.Response:
    """What the routes answer for a refusal: never a 500 for a client's mistake."""
    if isinstance(exc, Refused):
        return for_flask.refusal(exc)
    if isinstance(exc, UnknownHandle):
        return _problem(404, str(exc))
    if isinstance(exc, UnknownRequest):
        return _problem(409, f"{exc} (answered already, or cancelled)")
    if isinstance(exc, (HandleClosed, SpawnError)):
        return _problem(409, str(exc))
    if isinstance(exc, StateError):
        return _problem(503, str(exc))
    return _problem(400, str(exc))


def blueprint(name: str = "toolnexus") -> flask.Blueprint:
    """The routes above, for ``app.register_blueprint`` (``Toolnexus`` registers them; the
    app needs the ``Toolnexus`` extension, whose ``authorize=`` they ask)."""
    routes = flask.Blueprint(name, __name__)
    routes.add_url_rule("", "start", start, methods=["POST"])
    routes.add_url_rule("/<run>", "show", show, methods=["GET"])
    routes.add_url_rule("/<run>/answer", "answer", answer, methods=["POST"])
    routes.add_url_rule("/<run>/events", "events", events, methods=["GET"])
    routes.register_error_handler(ToolnexusError, _refused)
    return routes
