"""The team: ``support`` reads the complaint and hands refunds to ``billing``.

Both tools use the ORM. Run inline (the default), they run on the request's thread, in
the view's transaction: they see its uncommitted rows and their writes commit or roll
back with it.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from toolnexus import AgentDef, ToolContext, failure, make_request, success, suspend, tool
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages

from .models import Complaint, Order, Refund

APPROVAL_ABOVE = Decimal("50.00")  # refunds above this need a person's yes


@tool
def read_complaint(complaint_id: int) -> str:
    """Read a customer's complaint and the order it is about."""
    complaint = Complaint.objects.select_related("order").get(pk=complaint_id)
    order = complaint.order
    return f"complaint {complaint.pk} on order {order.number} ({order.amount} EUR, {order.status}): {complaint.text}"


@tool
def issue_refund(order_number: str, ctx: ToolContext):
    """Refund an order in full. Refunds above 50 EUR wait for a person's approval (a
    declined or expired approval never runs this again: the model gets the error)."""
    with transaction.atomic():  # inline: a savepoint inside the view's transaction
        order = Order.objects.select_for_update().get(number=order_number)
        if order.status == "refunded":
            return failure(f"order {order.number} is refunded already")
        if order.amount > APPROVAL_ABOVE and ctx.answer is None:
            prompt = f"Refund {order.amount} EUR on order {order.number}?"
            expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=settings.APPROVAL_TTL)
            data = {"order": order.number, "amount": str(order.amount)}
            return suspend(make_request("approval", prompt, data=data, expires_at=expires.isoformat()))
        if ctx.cancelled.is_set():  # the run was interrupted (e.g. timed out) while this waited for the lock
            return failure("interrupted before refunding")
        Refund.objects.create(order=order, amount=order.amount)
        order.status = "refunded"
        order.save(update_fields=["status"])
    return success(f"refunded {order.amount} EUR on order {order.number}", order=order.number)


TEAM = {
    "support": AgentDef(
        "support",
        "Answers customer complaints",
        soul="You answer complaints. Read the complaint first; delegate refunds to billing.",
        tools=(read_complaint,),
        team=("billing",),
    ),
    "billing": AgentDef("billing", "Refunds orders", soul="You refund orders with issue_refund.", tools=(issue_refund,)),
}


# --- an offline stand-in for the model ------------------------------------------------------------

_COMPLAINT = re.compile(r"Complaint #(\d+) on order (\S+): (.*)", re.S)


def _support(request: dict[str, Any]) -> dict[str, Any]:
    found = _COMPLAINT.search(last_user_text(request))
    results = tool_messages(request)
    if found is None:
        return {"content": "I only handle complaints."}
    complaint_id, order, text = found.groups()
    if not results:
        return {"tool_calls": [{"id": "read", "name": "read_complaint", "arguments": {"complaint_id": int(complaint_id)}}]}
    if len(results) == 1 and "refund" in text.lower():
        return {"tool_calls": [{"id": "refund", "name": "task", "arguments": {"agent": "billing", "prompt": f"Refund order {order}"}}]}
    return {"content": f"Dear customer, {results[-1]}"}


def _billing(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": results[-1]}
    order = last_user_text(request).rsplit(" ", 1)[-1]
    return {"tool_calls": [{"id": "issue", "name": "issue_refund", "arguments": {"order_number": order}}]}


def _route(request: dict[str, Any]) -> dict[str, Any]:
    tools = {t["function"]["name"] for t in request["tools"]}
    return _support(request) if "task" in tools else _billing(request)


def scripted_model() -> ScriptedModel:
    return ScriptedModel({"scripted": _route}, usage={"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50})


SCRIPTED = scripted_model()
