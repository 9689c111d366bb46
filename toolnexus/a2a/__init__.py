"""A2A 1.0 (Agent2Agent, as ``a2a-sdk`` 1.3.0 speaks it): serve a team as a peer that
other agents call, with no event loop and no new dependency (JSON-RPC over WSGI).

    from toolnexus import a2a

    app = a2a.wsgi_app(rt, agent="support", authorize=lambda environ: user_of(environ))
    # Flask:  flask_app.register_blueprint(a2a.blueprint(rt, agent="support", authorize=...))
    # Django: path("a2a/", include(a2a.django_urls(toolnexus.django.runtime, agent="support", authorize=...)))

The endpoint, relative to where it is mounted: ``GET /.well-known/agent-card.json`` (the
Agent Card: the agent and one skill per teammate) and ``POST /`` (JSON-RPC with header
``A2A-Version: 1.0``): ``SendMessage``, ``SendStreamingMessage`` (Server-Sent Events),
``GetTask``, ``CancelTask``, ``SubscribeToTask``.

- **A task is one run.** A message without ``taskId`` spawns ``agent`` under the root and
  wakes it on the message's text (data parts as their JSON). The task id is random and
  bound to the caller's principal (another caller's task is ``-32001``, as a missing one).
- **Input required is a pending request.** A ``Request`` anywhere in the run's tree makes
  the task ``TASK_STATE_INPUT_REQUIRED``, its status message the prompt and the Request
  JSON as a data part. The caller's next message on the task answers it: a first data part
  ``{"ok": false, "reason": ...}`` declines, anything else approves (with that object, or
  ``{"text": ...}``). With a state (CONTRACT §11) the answer, ``GetTask``, ``CancelTask``
  and ``SubscribeToTask`` may reach any worker process.
- **Streams end when a person must act**: after the ``INPUT_REQUIRED`` (or terminal)
  status update; the caller answers, then streams again. At most ``max_streams`` per
  process; one more is ``503`` with ``Retry-After``.
- **CancelTask** interrupts the run (a request it waits on is cancelled).
- **Bad requests** get the JSON-RPC error ``a2a-sdk`` gives, with HTTP 200, and start
  nothing: ``-32700`` not JSON, ``-32600`` not a request, ``-32601`` no such method,
  ``-32602`` params that do not fit, ``-32001`` no such task, ``-32002`` cancel of an ended
  task, ``-32004`` a message to (or subscribe of) an ended task, ``-32009`` an
  ``A2A-Version`` other than 1.x (a missing header means 0.3).

It is a served surface (CONTRACT §20): ``authorize=`` (called with the WSGI ``environ``,
Flask's request, or Django's ``HttpRequest``, before anything of a request is read)
returns the caller's principal or refuses (``401``); without it, ``public=True`` is the
only way to open the endpoint: anyone who can reach the app can start, read and answer
every task. The card is served to admitted callers only.
"""

from __future__ import annotations

from typing import Any, Callable

from .._serve import Access
from .._serve.bodies import MAX_BODY, check_limit
from .._serve.slots import MAX_STREAMS
from .._a2a.peer import Peer, PeerError
from .._a2a.rpc import VERSION
from ._service import CARD_PATH, RuntimeLike, Service
from ._wsgi import A2AApp

__all__ = ["A2AApp", "CARD_PATH", "Peer", "PeerError", "VERSION", "blueprint", "django_urls", "wsgi_app"]

#: Seconds of silence on a stream before a ``: keep-alive`` comment.
HEARTBEAT_S = 15.0


def _service(
    runtime: RuntimeLike,
    *,
    agent: str,
    authorize: Callable[..., Any] | None = None,
    public: bool = False,
    version: str = "1.0.0",
    url: str | None = None,
    max_streams: int = MAX_STREAMS,
    max_body: int = MAX_BODY,
    heartbeat_s: float = HEARTBEAT_S,
) -> Service:
    access = Access.build(authorize, public, what="the A2A endpoint")
    return Service(
        runtime,
        agent=agent,
        access=access,
        version=version,
        url=url,
        max_body=check_limit(max_body, "max_body"),
        max_streams=max_streams,
        heartbeat_s=heartbeat_s,
    )


def wsgi_app(
    runtime: RuntimeLike,
    *,
    agent: str,
    version: str = "1.0.0",
    url: str | None = None,
    authorize: Callable[[dict[str, Any]], Any] | None = None,
    public: bool = False,
    max_streams: int = MAX_STREAMS,
    max_body: int = MAX_BODY,
    heartbeat_s: float = HEARTBEAT_S,
) -> A2AApp:
    """``agent`` of ``runtime`` as an A2A peer: a WSGI app answering relative to where it
    is mounted.

    Args:
        runtime: the ``Runtime`` that runs the tasks, or a function of no arguments that
            returns it (asked on every request, e.g. one runtime per worker process).
        agent: the agent a task runs; its ``does`` is the card's description, and it and
            each teammate is one skill.
        version: the agent's version, on the card.
        url: the JSON-RPC endpoint's absolute URL as callers reach it (behind a proxy);
            by default the URL the card's request came to.
        authorize: ``authorize(environ)`` returns the caller's principal (a non-empty
            ``str``; ``True`` admits a shared one) or a falsy value (``401``).
        public: open the endpoint with no ``authorize``: anyone who can reach the app can
            start, read and answer every task.
        max_streams: open streams per process; one more is ``503`` with ``Retry-After``.
        max_body: the largest request body read, in bytes (``413`` past it).
        heartbeat_s: seconds of silence on a stream before a keep-alive comment.

    Returns:
        The WSGI app.

    Raises:
        ConfigError: neither ``authorize`` nor ``public=True`` (or both); a runtime whose
            registry has no ``agent``; a bad ``max_streams`` or ``max_body``.
    """
    return A2AApp(
        _service(
            runtime, agent=agent, authorize=authorize, public=public, version=version, url=url,
            max_streams=max_streams, max_body=max_body, heartbeat_s=heartbeat_s,
        )
    )


def blueprint(runtime: RuntimeLike, *, agent: str, url_prefix: str = "/a2a", name: str = "a2a", **options: Any) -> Any:
    """The same endpoint as a Flask blueprint: ``POST <url_prefix>/`` and ``GET
    <url_prefix>/.well-known/agent-card.json`` (needs the ``flask`` extra).

    ``options`` are ``wsgi_app``'s keywords (``authorize``, ``public``, ``version``,
    ``url``, ``max_streams``, ``max_body``, ``heartbeat_s``). ``authorize`` is called inside
    the request (``flask.request`` current; it is given the request unless it takes no
    argument) and may ``flask.abort(401|403)`` itself; ``name`` is the blueprint's name.

    Returns:
        A ``flask.Blueprint`` for ``app.register_blueprint``.

    Raises:
        ConfigError: as ``wsgi_app``.
        TypeError: a keyword ``wsgi_app`` does not have.
    """
    from ._flask import build

    return build(_service(runtime, agent=agent, **options), url_prefix=url_prefix, name=name)


def django_urls(runtime: RuntimeLike, *, agent: str, name: str = "a2a", **options: Any) -> list[Any]:
    """The same endpoint as Django URL patterns, to include under a prefix::

        path("a2a/", include(a2a.django_urls(toolnexus.django.runtime, agent="support",
                                             authorize=lambda request: request.user.get_username() or None)))

    ``options`` are ``wsgi_app``'s keywords. ``authorize`` is given the ``HttpRequest``
    (after the middleware: ``request.user`` is the login's) and may raise
    ``PermissionDenied``; the views are exempt from CSRF (the body must be JSON). ``name``
    names the endpoint's URL (the card's is ``<name>-card``).

    Returns:
        A list of ``path()`` entries.

    Raises:
        ConfigError: as ``wsgi_app``.
        TypeError: a keyword ``wsgi_app`` does not have.
    """
    from ._django import build

    return build(_service(runtime, agent=agent, **options), name=name)
