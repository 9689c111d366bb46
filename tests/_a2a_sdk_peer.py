"""A remote agent built on a2a-sdk 1.3.0's server (Starlette under uvicorn), for the tests of
calling a remote teammate: ``python tests/_a2a_sdk_peer.py PORT``.

The first word of a new task's text picks what it does:
``echo`` completes with an artifact sent as two chunks (``hello `` then ``world``);
``ask`` wants input (a text part and a data part ``{"kind": "approval", "amount": 5}``)
and completes on the next message with ``answered: <its text>``; ``wait`` works until
canceled; ``hold`` works until ``POST /release/<task id>``, then completes with
``released``; ``fail`` fails saying ``it broke``; ``raise`` raises in the executor; ``msg``
answers with a bare message. It prints ``started <task id>`` and ``canceled <task id>``
lines, for a test to follow. A second card, at ``/plain/.well-known/agent-card.json``,
offers the same endpoint without streaming (callers then send ``SendMessage``).
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from a2a.helpers import get_message_text, new_data_part, new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


#: The events ``hold`` tasks wait for, by task id.
HELD: dict[str, asyncio.Event] = {}


async def release(request: Request) -> Response:
    HELD.setdefault(request.path_params["task_id"], asyncio.Event()).set()
    return Response(status_code=204)


def say(line: str) -> None:
    print(line, flush=True)


class Peer(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message)
        task = context.current_task
        if task is None and text == "msg":
            await event_queue.enqueue_event(new_text_message("plain reply", context_id=context.context_id))
            return
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            say(f"started {task.id}")
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([new_text_part(f"answered: {text}")], name="answer")
            await updater.complete()
            return
        await updater.start_work()
        word = text.split()[0] if text.split() else ""
        if word == "echo":
            await updater.add_artifact([new_text_part("hello ")], artifact_id="a1", name="echo")
            await updater.add_artifact([new_text_part("world")], artifact_id="a1", append=True, last_chunk=True)
            await updater.complete()
        elif word == "ask":
            question = [new_text_part("Approve the transfer?"), new_data_part({"kind": "approval", "amount": 5})]
            await updater.requires_input(updater.new_agent_message(question))
        elif word == "wait":
            await asyncio.sleep(600)
        elif word == "hold":
            await asyncio.wait_for(HELD.setdefault(task.id, asyncio.Event()).wait(), 600)
            await updater.add_artifact([new_text_part("released")], name="held")
            await updater.complete()
        elif word == "fail":
            await updater.failed(updater.new_agent_message([new_text_part("it broke")]))
        elif word == "raise":
            raise RuntimeError("the executor blew up")
        else:
            await updater.complete(updater.new_agent_message([new_text_part(f"did {text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        say(f"canceled {context.task_id}")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("canceled as asked")]))


def app(port: int) -> Starlette:
    card = AgentCard(
        name="sdk-peer",
        description="a remote agent of a2a-sdk",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="peer", name="peer", description="echoes, asks, waits, fails", tags=["test"])],
    )
    plain = AgentCard()
    plain.CopyFrom(card)
    plain.capabilities.streaming = False
    handler = DefaultRequestHandler(agent_executor=Peer(), task_store=InMemoryTaskStore(), agent_card=card)
    cards = create_agent_card_routes(card)
    cards += create_agent_card_routes(plain, card_url="/plain/.well-known/agent-card.json")
    released = [Route("/release/{task_id}", release, methods=["POST"])]
    return Starlette(routes=cards + released + create_jsonrpc_routes(handler, rpc_url="/"))


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2)
