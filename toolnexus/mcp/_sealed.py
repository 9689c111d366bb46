"""The ``requestState`` this package's MCP server hands a client with a question, and takes
back with its answer (CONTRACT §18b "Suspension ⇒ MRTR").

It is ``base64url(JSON payload) + "." + base64url(HMAC-SHA256(secret, payload))``: readable,
but nobody without the secret can make one or change one. The payload names what the answer
may continue (the tool, a digest of its arguments, the ``Request``, the principal, for an
agent the runtime and its pending run) and until when. A client is hostile until the MAC
says otherwise: anything that does not verify, has expired, or names another tool, other
arguments or another principal is refused the same way, and nothing runs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

#: The longest requestState looked at (a longer one is refused unread).
MAX_STATE = 64 * 1024


def new_secret() -> bytes:
    """A random secret for one process (a retry then works only in that process)."""
    return secrets.token_bytes(32)


def secret_bytes(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def digest(arguments: Any) -> str:
    """A digest of a call's arguments that is the same for any JSON-equal arguments."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(secret: bytes, payload: dict[str, Any]) -> str:
    """The signed token of ``payload`` (a JSON object)."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    mac = hmac.new(secret, body, hashlib.sha256).digest()
    return f"{_encode(body)}.{_encode(mac)}"


def opened(secret: bytes, token: Any, *, now: float | None = None) -> dict[str, Any] | None:
    """The payload of a token this secret sealed and that has not expired (its ``exp``,
    seconds since the epoch); None for anything else."""
    if not isinstance(token, str) or len(token) > MAX_STATE or token.count(".") != 1:
        return None
    body_text, mac_text = token.split(".")
    try:
        body, mac = _decode(body_text), _decode(mac_text)
    except ValueError:
        return None
    if not hmac.compare_digest(hmac.new(secret, body, hashlib.sha256).digest(), mac):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    expiry = payload.get("exp")
    if not isinstance(expiry, (int, float)) or (time.time() if now is None else now) >= expiry:
        return None
    return payload


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decode(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def expiry(ttl_s: float) -> float:
    """The ``exp`` of a payload good for ``ttl_s`` seconds from now."""
    return time.time() + ttl_s
