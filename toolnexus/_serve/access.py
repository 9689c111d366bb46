"""Who asks (CONTRACT §20): the access rule of one served surface.

``Access.build(authorize, public, what=...)`` is called once, where a surface is built or
registered: neither ``authorize=`` nor ``public=True`` is a ``ConfigError`` (a surface is
closed unless the app opens it on purpose). ``access.principal(request)`` is called
before every request is served and returns the caller's principal, or raises
``Refused(401)``:

- ``authorize`` a callable: called with the framework's request (the WSGI ``environ``,
  Django's ``HttpRequest``, Flask's ``request``), or with no argument when it takes none
  (a Flask hook that reads ``flask.request``). A non-empty ``str`` it returns is the
  principal; any other truthy value admits the caller as the one shared principal
  (``SHARED``); a falsy one refuses. It may raise itself (``flask.abort(403)``, Django's
  ``PermissionDenied``, ``Refused(403, ...)``): that goes to the framework as it is.
- ``authorize`` a string (surfaces built with ``tokens=True``, the MCP server): a bearer
  token; the request must carry ``Authorization: Bearer <it>`` (compared in constant time)
  and is then the shared principal.
- ``public=True``: anyone who can reach the app can start, read and answer every run; every
  caller is the shared principal.

A principal is a ``str``: a user's name as the app's login knows it, or ``SHARED`` (the
empty string, which no hook can return as a principal, so no user is ever mistaken for it).
"""

from __future__ import annotations

import hmac
import inspect
from typing import Any, Callable, Union

from ..errors import ConfigError
from .refused import Refused

#: The principal of a public surface, and of callers a hook admitted with ``True``.
SHARED = ""

#: What ``authorize=`` may be: a hook, or (where ``tokens=True``) a bearer token.
Authorize = Union[Callable[..., Any], str, None]

#: What the ``public=True`` option means, for error messages and docs.
PUBLIC_MEANS = "anyone who can reach the app can start, read and answer every run"


class Access:
    """One surface's rule for who may ask: build it with ``Access.build``."""

    def __init__(self, hook: Callable[..., Any] | None, token: str | None, *, public: bool, what: str) -> None:
        self._hook = hook
        self._token = token.encode("utf-8") if token is not None else None
        self._takes_request = hook is not None and _takes_an_argument(hook)
        self.public = public
        self.what = what

    @classmethod
    def build(cls, authorize: Authorize = None, public: bool = False, *, what: str, tokens: bool = False) -> Access:
        """The access rule of the surface named ``what``.

        Raises:
            ConfigError: neither ``authorize=`` nor ``public=True``; both; an ``authorize``
                that is neither a callable nor (with ``tokens``) a non-empty string.
        """
        if public is not True and public is not False:
            raise ConfigError(f"{what}: public must be True or False, not {public!r}")
        if authorize is None and not public:
            raise ConfigError(
                f"{what}: pass authorize= (a function of the request that returns the caller's principal, or None to"
                f" refuse), or public=True only if {PUBLIC_MEANS} (served surfaces are closed by default)"
            )
        if authorize is not None and public:
            raise ConfigError(f"{what}: give authorize= or public=True, not both")
        if authorize is None:
            return cls(None, None, public=True, what=what)
        if isinstance(authorize, str):
            if not tokens:
                raise ConfigError(f"{what}: authorize= must be a function of the request")
            if not authorize:
                raise ConfigError(f"{what}: an empty bearer token would admit anyone; pass public=True for that")
            return cls(None, authorize, public=False, what=what)
        if not callable(authorize):
            raise ConfigError(f"{what}: authorize= must be a function of the request, not {type(authorize).__name__}")
        return cls(authorize, None, public=False, what=what)

    def __repr__(self) -> str:
        kind = "public" if self.public else "bearer token" if self._token is not None else "authorize hook"
        return f"Access({self.what!r}, {kind})"  # never the token itself

    def principal(self, request: Any = None, *, authorization: str | None = None) -> str:
        """The caller's principal, before anything of the request is served.

        ``request`` is what the hook is given; ``authorization`` the request's
        ``Authorization`` header, read by the surface (only a bearer token needs it).

        Raises:
            Refused: ``401``, the hook refused (a falsy value) or the token is missing or wrong.
        """
        if self.public:
            return SHARED
        if self._token is not None:
            return self._bearer(authorization)
        assert self._hook is not None
        found = self._hook(request) if self._takes_request else self._hook()
        if isinstance(found, str):
            if found:
                return found
        elif found:
            return SHARED
        raise Refused(401, "authentication required")

    def _bearer(self, authorization: str | None) -> str:
        scheme, _, given = (authorization or "").strip().partition(" ")
        assert self._token is not None
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "surrogatepass"), self._token
        ):
            return SHARED
        raise Refused(
            401, "authentication required: send Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"}
        )


def _takes_an_argument(hook: Callable[..., Any]) -> bool:
    """Whether ``hook`` can be given the request (a hook of no parameters reads it from
    the framework, as a Flask one reads ``flask.request``)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): give it the request
        return True
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(parameter.kind in positional for parameter in parameters)
