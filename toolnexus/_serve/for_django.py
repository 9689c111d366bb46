"""The served layer inside a Django view: for the views of the AG-UI and A2A endpoints
(and any view ``toolnexus.django`` ships that starts or answers runs).

    def view(request):
        try:
            principal = for_django.principal(access, request)   # 401 before anything else
            body = for_django.read_json(request, limit=max_body)  # 415 / 413 / 400
        except Refused as refused:
            return for_django.refusal(refused)
        ...

A hook's own ``PermissionDenied`` goes to Django as it is (``403``).
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from .access import Access
from .bodies import MAX_BODY, content_length, json_body
from .refused import Refused


def principal(access: Access, request: Any) -> str:
    """The caller's principal; the hook is given the ``HttpRequest``.

    Raises:
        Refused: ``401``.
    """
    return access.principal(request, authorization=request.headers.get("Authorization"))


def read_json(request: Any, *, limit: int = MAX_BODY, what: str = "the body") -> Any:
    """The request body as strict JSON, after the served layer's checks (read from the
    request's stream, so Django's own body buffer is not filled first).

    Raises:
        Refused: ``415`` not JSON, ``413`` too large, ``400`` malformed.
    """
    length = content_length(request.META.get("CONTENT_LENGTH"))
    return json_body(request.META.get("CONTENT_TYPE"), length or 0, request.read, limit=limit, what=what)


def refusal(refused: Refused) -> JsonResponse:
    """A ``Refused`` as a Django answer."""
    return JsonResponse({"error": refused.reason}, status=refused.status, headers=refused.headers)
