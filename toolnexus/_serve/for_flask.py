"""The served layer inside a Flask request (``flask.request`` current): for the blueprints
of ``toolnexus.flask``, and of the AG-UI and A2A endpoints.

    principal = for_flask.principal(access)            # 401 before anything else
    body = for_flask.read_json(limit=max_body)         # 415 / 413 / 400
    ...
    blueprint.register_error_handler(Refused, for_flask.refusal)

``refusal`` answers a ``Refused`` as JSON ``{"error": reason}`` with its status and headers.
"""

from __future__ import annotations

from typing import Any

import flask

from .access import Access
from .bodies import MAX_BODY, json_body
from .refused import Refused


def principal(access: Access) -> str:
    """The caller's principal; the hook is given ``flask.request`` (or nothing, when it
    takes no argument and reads ``flask.request`` itself).

    Raises:
        Refused: ``401``. (A hook's own ``flask.abort(401|403)`` goes to Flask as it is.)
    """
    request = flask.request._get_current_object()  # type: ignore[attr-defined]
    return access.principal(request, authorization=request.headers.get("Authorization"))


def read_json(*, limit: int = MAX_BODY, what: str = "the body") -> Any:
    """The request body as strict JSON, after the served layer's checks.

    Raises:
        Refused: ``415`` not JSON, ``413`` too large, ``400`` malformed.
    """
    request = flask.request
    return json_body(
        request.headers.get("Content-Type"), request.content_length, request.stream.read, limit=limit, what=what
    )


def refusal(refused: Refused) -> flask.Response:
    """A ``Refused`` as Flask's answer."""
    response = flask.jsonify({"error": refused.reason})
    response.status_code = refused.status
    response.headers.update(refused.headers)
    return response
