"""A remote A2A agent: where it is and how to reach it (``Peer``), its Agent Card (read
once per runtime: ``Cards``), and JSON-RPC calls to it over ``requests`` (``Link``): a
plain call, and a call answered with Server-Sent Events, read frame by frame.

Every call sends ``A2A-Version: 1.0`` (a peer takes a missing header for 0.3 and refuses
it) and runs in the caller's ``CancelScope``: an interrupt shuts its connection at once.
Whatever goes wrong is a ``PeerError`` naming the peer's URL and the cause: refused, timed
out, an HTTP status, a JSON-RPC error (its code and message), a reply that is not A2A.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import urljoin, urlsplit

import attrs

from .._model.cancel import CancelScope, current_scope, set_current_scope
from .._model.sse_reader import SSEDecoder
from .._model.transport import cancellable_session, describe_failure, public_url, track_host_adapter
from ..errors import ConfigError, ToolnexusError
from . import rpc

if TYPE_CHECKING:
    import requests

#: Where a peer's Agent Card is, below its URL.
CARD_PATH = "/.well-known/agent-card.json"
#: The most a reply (or one event of a stream) may hold.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: How long a call made after an interrupt (``CancelTask``) may take.
CANCEL_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0
_CHUNK = 65536
_EXCERPT = 200


class PeerError(ToolnexusError):
    """A remote agent could not be reached or did not answer as A2A says; ``code`` is the
    JSON-RPC error's code when it answered with one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def _headers(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


def _check_url(instance: Peer, field: attrs.Attribute[str], value: str) -> None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"a2a: {value!r} is not the http(s) URL of a remote agent")


def _check_timeout(instance: Peer, field: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ConfigError(f"a2a: timeout must be a positive number of seconds, not {value!r}")


@attrs.frozen
class Peer:
    """A remote A2A agent, as a teammate reaches it (``AgentDef(..., a2a=Peer(...))``; a
    plain URL is ``Peer(url)``).

    ``url`` is the base of its Agent Card (``<url>/.well-known/agent-card.json``);
    ``headers`` go with every call (credentials: they are never logged or shown);
    ``session`` is a ``requests.Session`` of the host's to call through (its cookies, a
    login, proxies, client certificates), else the library's own; ``timeout`` (seconds)
    bounds the connection and every wait for the peer: a plain reply, or the next frame
    of a stream (A2A servers send a keep-alive every 15 s).
    """

    url: str = attrs.field(validator=_check_url)
    headers: dict[str, str] = attrs.field(factory=dict, converter=_headers, repr=False)
    session: Any = attrs.field(default=None, eq=False, repr=False)
    timeout: float = attrs.field(default=300.0, validator=_check_timeout)

    @property
    def where(self) -> str:
        """The URL as messages show it (no credentials, query or fragment)."""
        return public_url(self.url)


def as_peer(value: Peer | str | None) -> Peer | None:
    """``AgentDef.a2a`` as a ``Peer``: a URL string is one with no headers.

    Raises:
        ConfigError: neither a ``Peer`` nor the http(s) URL of one.
    """
    if value is None or isinstance(value, Peer):
        return value
    if isinstance(value, str):
        return Peer(value)
    raise ConfigError(f"a2a must be a URL or a2a.Peer, not {type(value).__name__}")


@attrs.frozen
class Card:
    """What a caller needs of a peer's card: its name, where JSON-RPC goes, and whether it
    streams."""

    name: str
    endpoint: str
    streaming: bool


def read_card(body: Any, peer: Peer) -> Card:
    """The JSON-RPC interface of A2A 1.x that a card offers.

    Raises:
        PeerError: the card is not an object, or offers no such interface.
    """
    if not isinstance(body, dict):
        raise PeerError(f"a2a peer {peer.where}: its Agent Card is not a JSON object")
    interfaces = body.get("supportedInterfaces")
    for interface in interfaces if isinstance(interfaces, list) else []:
        if not isinstance(interface, dict) or interface.get("protocolBinding") != "JSONRPC":
            continue
        version = str(interface.get("protocolVersion") or "1.0")
        url = interface.get("url")
        if version.split(".")[0] == "1" and isinstance(url, str) and url:
            capabilities = body.get("capabilities")
            streaming = isinstance(capabilities, dict) and capabilities.get("streaming") is True
            name = body.get("name")
            return Card(name if isinstance(name, str) else "", urljoin(peer.url, url), streaming)
    raise PeerError(f"a2a peer {peer.where}: its Agent Card offers no JSON-RPC interface of A2A 1.x")


class Cards:
    """The cards of the peers one runtime calls, each read once (a failed read is tried
    again by the next call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _found
        self._found: dict[str, Card] = {}

    def get(self, peer: Peer, scope: CancelScope | None, *, timeout: float | None = None) -> Card:
        """``peer``'s card (read within ``timeout`` seconds when given, else the peer's).

        Raises:
            PeerError: it could not be read.
        """
        with self._lock:
            found = self._found.get(peer.url)
        if found is not None:
            return found
        body = Link(peer, peer.url.rstrip("/") + CARD_PATH, scope, timeout=timeout).get()
        card = read_card(body, peer)
        with self._lock:
            return self._found.setdefault(peer.url, card)


_own_lock = threading.Lock()  # guards: _own
_own: list[requests.Session] = []


def _session(peer: Peer) -> requests.Session:
    """The session a peer is called through: the host's (its adapters made cancellable),
    or the library's own, shared by every peer."""
    if peer.session is not None:
        for prefix in ("https://", "http://"):
            track_host_adapter(peer.session.get_adapter(prefix))
        return peer.session  # type: ignore[no-any-return]
    with _own_lock:
        if not _own:
            _own.append(cancellable_session())
        return _own[0]


class Link:
    """Calls to one URL of a peer, in ``scope`` (``None``: a call no interrupt stops)."""

    def __init__(self, peer: Peer, url: str, scope: CancelScope | None, *, timeout: float | None = None) -> None:
        self._peer = peer
        self._url = url
        self._scope = scope
        self._timeout = (min(_CONNECT_TIMEOUT_S, timeout or peer.timeout), timeout or peer.timeout)
        self._headers = {**peer.headers, "A2A-Version": rpc.VERSION}

    def get(self) -> Any:
        """``GET`` the URL as JSON (the card)."""
        with _call_scope(self._scope) as scope:
            response = self._send("GET", None, "application/json", scope)
            try:
                return self._json(response)
            finally:
                response.close()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """One JSON-RPC call answered as JSON: its result.

        Raises:
            PeerError: not reached, an HTTP status, a JSON-RPC error, a reply not JSON-RPC.
        """
        with _call_scope(self._scope) as scope:
            response = self._send("POST", _request(method, params), "application/json", scope)
            try:
                return _result(self._json(response), self._peer, method)
            finally:
                response.close()

    def stream(self, method: str, params: dict[str, Any]) -> Iterator[Any]:
        """One JSON-RPC call answered with Server-Sent Events: the result of each frame, as
        it comes (a reply sent as plain JSON, such as an error before the stream, is one
        result or its error)."""
        with _call_scope(self._scope) as scope:
            response = self._send("POST", _request(method, params), "text/event-stream", scope)
            try:
                if "text/event-stream" not in response.headers.get("Content-Type", ""):
                    yield _result(self._json(response), self._peer, method)
                    return
                yield from self._frames(response, method)
            finally:
                response.close()

    def _send(self, verb: str, body: dict[str, Any] | None, accept: str, scope: CancelScope) -> requests.Response:
        headers = {**self._headers, "Accept": accept}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        before = current_scope()
        set_current_scope(scope)  # the connection the request takes joins the call's scope
        try:
            response = _session(self._peer).request(
                verb, self._url, data=data, headers=headers, timeout=self._timeout, stream=True, allow_redirects=False
            )
        except Exception as exc:
            raise self._failed(describe_failure(exc)) from None
        finally:
            set_current_scope(before)
        if response.status_code != 200:
            excerpt = _excerpt(response)
            response.close()
            raise self._failed(f"HTTP {response.status_code}" + (f": {excerpt}" if excerpt else ""))
        return response

    def _json(self, response: requests.Response) -> Any:
        content = bytearray()
        try:
            for chunk in response.iter_content(_CHUNK):
                content += chunk
                if len(content) > MAX_MESSAGE_BYTES:
                    raise self._failed(f"a reply over {MAX_MESSAGE_BYTES} bytes")
            return json.loads(content)
        except PeerError:
            raise
        except ValueError:
            raise self._failed("a reply that is not JSON") from None
        except Exception as exc:
            raise self._failed(describe_failure(exc)) from None

    def _frames(self, response: requests.Response, method: str) -> Iterator[Any]:
        decoder = SSEDecoder()
        held = 0
        try:
            for chunk in response.iter_content(_CHUNK):
                events = decoder.feed(chunk)
                held = held + len(chunk) if decoder.partial else 0
                if held > MAX_MESSAGE_BYTES:
                    raise self._failed(f"an event over {MAX_MESSAGE_BYTES} bytes")
                for event in events:
                    try:
                        reply = json.loads(event.data)
                    except ValueError:
                        raise self._failed("an event that is not JSON") from None
                    yield _result(reply, self._peer, method)
        except PeerError:
            raise
        except Exception as exc:
            raise self._failed(describe_failure(exc)) from None

    def _failed(self, cause: str) -> PeerError:
        scope = self._scope
        if scope is not None and scope.cancelled:
            cause = "interrupted"
        return PeerError(f"a2a peer {self._peer.where}: {cause}")


@contextlib.contextmanager
def _call_scope(outer: CancelScope | None) -> Iterator[CancelScope]:
    """A scope for one call, cancelled with ``outer`` (the turn's): an interrupt shuts the
    call's connection wherever it is blocked; the connection leaves the scope after."""
    scope = CancelScope()
    with outer.waking(scope.cancel) if outer is not None else contextlib.nullcontext():
        if outer is not None and outer.cancelled:
            scope.cancel()
        try:
            yield scope
        finally:
            scope.detach_all()


def _excerpt(response: requests.Response) -> str:
    """The start of an error reply's body (a peer's reason), read no further."""
    try:
        head = next(response.iter_content(_EXCERPT), b"")
    except Exception:
        return ""
    return head.decode("utf-8", "replace").strip()


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def _result(reply: Any, peer: Peer, method: str) -> Any:
    """The ``result`` of a JSON-RPC response.

    Raises:
        PeerError: an ``error`` (named by code and message), or not a response.
    """
    if isinstance(reply, dict) and "result" in reply:
        return reply["result"]
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message", ""))[:_EXCERPT]
        code = error.get("code")
        raise PeerError(
            f"a2a peer {peer.where}: {method} failed with error {code}: {message}",
            code if isinstance(code, int) and not isinstance(code, bool) else None,
        )
    raise PeerError(f"a2a peer {peer.where}: {method} got a reply that is not JSON-RPC")
