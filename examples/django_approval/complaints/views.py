"""The views: a complaint runs the team inline, inside the view's transaction.

Every view is behind the project's login (Django's own sessions): ``POST /login/``
``{"username", "password"}`` signs in, ``POST /logout/`` out. Without a session a view
answers ``401``; a complaint belongs to whoever filed it, and anyone else gets ``404`` for
it (showing it or answering its approval), exactly as for one that does not exist. Posts
take ``Content-Type: application/json`` only (else ``415``, nothing runs), so a page on
another site cannot post without a CORS preflight, and the session cookie is
``SameSite=Lax``.

    POST /complaints/   {"order": "A-1001", "text": "...", "dry_run"?: true}
        200 {"complaint", "status": "done", "reply"}          answered (and committed)
        202 {"complaint", "status": "pending", "pending"}     a refund waits for approval
        200 {"complaint": null, "status": ..., "reply"}       dry run, or a run that did not
                                                              finish: everything rolled back
    POST /answers/      {"id": <request id>, "ok": true|false}
        200 / 202 as above; 404 no complaint of yours asked that; 409 the request was answered
        already (or expired), as the Flask extension says of a run that waits for no answer.
        Any worker process answers: the runs live in the database.
    POST /orders/       {"number": "...", "amount": "12.50"}
    GET  /complaints/<id>/, GET /orders/<number>/

Every response names the process that served it (``X-Served-By``: its pid). The admin
(``/admin/``, toolnexus › pending requests) approves or declines waiting refunds too;
``record_answer`` then updates the complaint.
"""

from __future__ import annotations

import functools
import os
from decimal import Decimal
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import authenticate, login, logout
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from toolnexus import AgentResult, Answer, Request, UnknownRequest, WireError
from toolnexus.django import runtime
from toolnexus.django import approvals
from toolnexus.wire import from_wire, parse_json, to_wire

from .models import Complaint, Order

View = Callable[..., JsonResponse]


def json_only(view: View) -> View:
    """``415`` for a post whose body is not declared ``application/json``: nothing runs."""

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        if request.method == "POST" and request.content_type != "application/json":
            return _response({"error": "send the body as Content-Type: application/json"}, status=415)
        return view(request, *args, **kwargs)

    return checked


def signed_in(view: View) -> View:
    """``401`` unless the project's login knows the caller; then the JSON rules above."""

    @functools.wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        if not request.user.is_authenticated:
            return _response({"error": "sign in first: POST /login/"}, status=401)
        return view(request, *args, **kwargs)

    return checked


@csrf_exempt
@require_POST
@json_only
def sign_in(request: HttpRequest) -> JsonResponse:
    body = _json(request)
    user = authenticate(request, username=body.get("username"), password=body.get("password"))
    if user is None:
        return _response({"error": "wrong username or password"}, status=401)
    login(request, user)
    return _response({"user": user.get_username()})


@csrf_exempt
@require_POST
def sign_out(request: HttpRequest) -> JsonResponse:
    logout(request)
    return _response({"user": None})


@csrf_exempt
@require_POST
@signed_in
@json_only
def file_complaint(request: HttpRequest) -> JsonResponse:
    body = _json(request)
    if not isinstance(body.get("order"), str) or not isinstance(body.get("text"), str):
        return _response({"error": 'send {"order": "...", "text": "..."}'}, status=400)
    with transaction.atomic():
        # Lock the order while the team works on it; inline, the team's own tools use this
        # same connection and transaction, so they are not blocked by the lock.
        order = Order.objects.select_for_update().filter(number=body["order"]).first()
        if order is None:
            return _response({"error": f"no order {body['order']!r}"}, status=404)
        complaint = Complaint.objects.create(order=order, text=body["text"], owner=request.user)
        prompt = f"Complaint #{complaint.pk} on order {order.number}: {complaint.text}"
        result = runtime().run_agent("support", prompt, timeout=settings.RUN_TIMEOUT)
        return _settle(complaint, result, keep=not body.get("dry_run"))


@csrf_exempt
@require_POST
@signed_in
@json_only
def answer(request: HttpRequest) -> JsonResponse:
    try:
        given = from_wire(Answer, _json(request))
        given.id.encode("utf-8")  # an id that is not text (a lone surrogate) matches no request
    except (WireError, UnicodeEncodeError) as exc:
        return _response({"error": str(exc)}, status=400)
    with transaction.atomic():
        asked = Complaint.objects.select_for_update().filter(request_id=given.id)
        complaint = asked.filter(owner=request.user).first()  # another user's is "no complaint", as a missing one
        if complaint is None:
            return _response({"error": f"no complaint asked request {given.id!r}"}, status=404)
        if complaint.status != "waiting":
            return _response({"error": f"request {given.id!r} was answered already"}, status=409)
        try:
            # Resumes the run here, whichever process asked; the resumed turns run inline,
            # in this transaction. record_answer updates the complaint.
            result = approvals.answer(given, timeout=settings.RUN_TIMEOUT)
        except UnknownRequest as exc:
            return _response({"error": str(exc)}, status=409)
        complaint.refresh_from_db()
        return _settle(complaint, result, keep=True)


def record_answer(sender: object, request: Request, answer: Answer, handle_id: str, result: AgentResult, **kwargs: object) -> None:
    """``request_answered`` receiver: the complaint waiting on ``request`` gets the outcome
    of its resumed run (in the transaction that answered), and a finished run is closed."""
    complaint = Complaint.objects.filter(request_id=request.id, status="waiting").first()
    if complaint is not None:
        _record(complaint, result)
    if result.status != "pending":
        runtime().close(handle_id)


@csrf_exempt
@require_POST
@signed_in
@json_only
def create_order(request: HttpRequest) -> JsonResponse:
    body = _json(request)
    try:
        order = Order.objects.create(number=str(body["number"]), amount=Decimal(str(body["amount"])))
    except (KeyError, ArithmeticError, IntegrityError) as exc:
        return _response({"error": f"cannot create that order: {exc}"}, status=400)
    return _response({"order": order.number, "status": order.status}, status=201)


@require_GET
@signed_in
def show_complaint(request: HttpRequest, complaint_id: int) -> JsonResponse:
    complaint = Complaint.objects.filter(pk=complaint_id, owner=request.user).first()
    if complaint is None:
        return _response({"error": "no such complaint"}, status=404)
    return _response({"complaint": complaint.pk, "status": complaint.status, "reply": complaint.reply, "request_id": complaint.request_id})


@require_GET
@signed_in
def show_order(request: HttpRequest, number: str) -> JsonResponse:
    order = Order.objects.filter(number=number).first()
    if order is None:
        return _response({"error": "no such order"}, status=404)
    return _response({"order": order.number, "status": order.status, "refunds": order.refunds.count(), "complaints": order.complaints.count()})


def _settle(complaint: Complaint, result: AgentResult, *, keep: bool) -> JsonResponse:
    """Record the run's outcome on the complaint, or roll everything back (the team's
    writes and the run's own state included) when it did not finish or when nothing is
    to be kept."""
    if keep and _record(complaint, result):
        if complaint.status == "waiting":
            assert result.pending is not None
            return _response({"complaint": complaint.pk, "status": "pending", "pending": to_wire(result.pending)}, status=202)
        return _response({"complaint": complaint.pk, "status": "done", "reply": result.text})
    transaction.set_rollback(True)
    return _response({"complaint": None, "status": result.status, "reply": result.text})


def _record(complaint: Complaint, result: AgentResult) -> bool:
    """Save a pending or finished outcome on the complaint; ``False`` for anything else."""
    if result.status == "pending" and result.pending is not None:
        complaint.status, complaint.request_id, complaint.handle_id = "waiting", result.pending.id, result.handle_id
    elif result.status == "done":  # request_id stays: answering it again is a 409
        complaint.status, complaint.reply = "answered", result.text
    else:
        return False
    complaint.save()
    return True


def _response(body: dict[str, Any], status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, headers={"X-Served-By": str(os.getpid())})


def _json(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object, or ``{}`` (which every view refuses with 400): strict, so
    NaN or a body nested past 64 levels is refused too, never a 500."""
    try:
        body = parse_json(request.body or b"{}", what="request body")
    except WireError:
        return {}
    return body if isinstance(body, dict) else {}
