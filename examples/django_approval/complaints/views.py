"""The views: a complaint runs the team inline, inside the view's transaction.

    POST /complaints/   {"order": "A-1001", "text": "...", "dry_run"?: true}
        200 {"complaint", "status": "done", "reply"}          answered (and committed)
        202 {"complaint", "status": "pending", "pending"}     a refund waits for approval
        200 {"complaint": null, "status": ..., "reply"}       dry run, or a run that did not
                                                              finish: everything rolled back
    POST /answers/      {"id": <request id>, "ok": true|false}
        200 / 202 as above; 404 no complaint waits on that id; 409 this process does not
        hold the waiting run
    POST /orders/       {"number": "...", "amount": "12.50"}
    GET  /complaints/<id>/, GET /orders/<number>/
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from toolnexus import AgentResult, Answer, UnknownRequest, WireError
from toolnexus.django import runtime
from toolnexus.wire import from_wire, to_wire

from .models import Complaint, Order


@csrf_exempt
@require_POST
def file_complaint(request: HttpRequest) -> JsonResponse:
    body = _json(request)
    if not isinstance(body.get("order"), str) or not isinstance(body.get("text"), str):
        return JsonResponse({"error": 'send {"order": "...", "text": "..."}'}, status=400)
    with transaction.atomic():
        # Lock the order while the team works on it; inline, the team's own tools use this
        # same connection and transaction, so they are not blocked by the lock.
        order = Order.objects.select_for_update().filter(number=body["order"]).first()
        if order is None:
            return JsonResponse({"error": f"no order {body['order']!r}"}, status=404)
        complaint = Complaint.objects.create(order=order, text=body["text"])
        prompt = f"Complaint #{complaint.pk} on order {order.number}: {complaint.text}"
        result = runtime().run_agent("support", prompt, timeout=settings.RUN_TIMEOUT)
        return _settle(complaint, result, keep=not body.get("dry_run"))


@csrf_exempt
@require_POST
def answer(request: HttpRequest) -> JsonResponse:
    try:
        given = from_wire(Answer, _json(request))
    except WireError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    with transaction.atomic():
        complaint = Complaint.objects.select_for_update().filter(request_id=given.id, status="waiting").first()
        if complaint is None:
            return JsonResponse({"error": f"no complaint waits on request {given.id!r}"}, status=404)
        rt = runtime()
        try:
            rt.resume(given)
        except UnknownRequest:
            # Held in another process's memory (or lost with a restart): answering it here
            # needs the team's state in a shared store.
            return JsonResponse({"error": f"request {given.id!r} is not held by this process"}, status=409)
        result = rt.wait(complaint.handle_id, timeout=settings.RUN_TIMEOUT)  # inline: the resumed turns run here
        if result.status != "pending":
            rt.close(complaint.handle_id)
        return _settle(complaint, result, keep=True)


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    body = _json(request)
    try:
        order = Order.objects.create(number=str(body["number"]), amount=Decimal(str(body["amount"])))
    except (KeyError, ArithmeticError, IntegrityError) as exc:
        return JsonResponse({"error": f"cannot create that order: {exc}"}, status=400)
    return JsonResponse({"order": order.number, "status": order.status}, status=201)


@require_GET
def show_complaint(request: HttpRequest, complaint_id: int) -> JsonResponse:
    complaint = Complaint.objects.filter(pk=complaint_id).first()
    if complaint is None:
        return JsonResponse({"error": "no such complaint"}, status=404)
    return JsonResponse({"complaint": complaint.pk, "status": complaint.status, "reply": complaint.reply, "request_id": complaint.request_id})


@require_GET
def show_order(request: HttpRequest, number: str) -> JsonResponse:
    order = Order.objects.filter(number=number).first()
    if order is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse({"order": order.number, "status": order.status, "refunds": order.refunds.count(), "complaints": order.complaints.count()})


def _settle(complaint: Complaint, result: AgentResult, *, keep: bool) -> JsonResponse:
    """Record the run's outcome on the complaint, or roll everything back (the team's
    writes included) when it did not finish or when nothing is to be kept."""
    if result.status == "pending" and result.pending is not None:
        complaint.status, complaint.request_id, complaint.handle_id = "waiting", result.pending.id, result.handle_id
        complaint.save()
        return JsonResponse({"complaint": complaint.pk, "status": "pending", "pending": to_wire(result.pending)}, status=202)
    if result.status == "done" and keep:
        complaint.status, complaint.reply, complaint.request_id = "answered", result.text, ""
        complaint.save()
        return JsonResponse({"complaint": complaint.pk, "status": "done", "reply": result.text})
    transaction.set_rollback(True)
    return JsonResponse({"complaint": None, "status": result.status, "reply": result.text})


def _json(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
