"""CONTRACT §22 "Calling", the reading of a remote task: what its frames (in whatever order
an A2A server sends them) rest in, as the teammate's outcome, and how an Answer goes back."""

from __future__ import annotations

from typing import Any

import pytest

from toolnexus import Answer
from toolnexus._a2a.peer import Card, Peer, PeerError, read_card
from toolnexus._a2a.remote import Tracker, answer_parts

PEER = Peer("http://peer.example/a2a")


def status(state: str, *parts: dict[str, Any]) -> dict[str, Any]:
    made: dict[str, Any] = {"state": f"TASK_STATE_{state}"}
    if parts:
        made["message"] = {"messageId": "n", "role": "ROLE_AGENT", "parts": list(parts)}
    return made


def follow(*results: dict[str, Any]) -> Tracker:
    tracker = Tracker()
    for result in results:
        tracker.take(result)
    return tracker


def chunk(text: str, append: bool = True) -> dict[str, Any]:
    artifact = {"artifactId": "a", "parts": [{"text": text}]}
    return {"artifactUpdate": {"taskId": "t1", "append": append, "artifact": artifact}}


def test_chunks_with_append_continue_one_artifact_and_join_without_a_separator() -> None:
    tracker = follow(
        {"task": {"id": "t1", "contextId": "c1", "status": status("SUBMITTED")}},
        chunk("hello ", append=False),
        chunk("wor"),
        chunk("ld"),
        {"statusUpdate": {"taskId": "t1", "status": status("COMPLETED")}},
    )
    assert tracker.outcome(PEER).text == "hello world"


def test_an_artifact_sent_again_without_append_replaces_the_first() -> None:
    tracker = follow(
        chunk("draft", append=False),
        chunk("final", append=False),
        {"statusUpdate": {"taskId": "t1", "status": status("COMPLETED")}},
    )
    assert tracker.outcome(PEER).text == "final"


def test_a_stream_that_begins_with_a_status_update_names_its_task() -> None:
    tracker = follow({"statusUpdate": {"taskId": "t9", "contextId": "c9", "status": status("WORKING")}})
    assert (tracker.task_id, tracker.context_id, tracker.resting) == ("t9", "c9", False)


def test_a_completed_task_with_no_text_answers_with_its_data() -> None:
    tracker = follow({"task": {"id": "t1", "status": status("COMPLETED"), "artifacts": [
        {"artifactId": "a", "parts": [{"data": {"total": 3.0}}]}
    ]}})
    assert tracker.outcome(PEER).text == '{"total": 3.0}'


def test_input_required_is_a_request_of_kind_a2a_with_the_task_and_the_question() -> None:
    asked = status("INPUT_REQUIRED", {"text": "Which size?"}, {"data": {"sizes": ["S", "M"]}})
    outcome = follow({"task": {"id": "t1", "contextId": "c1", "status": asked}}).outcome(PEER)
    assert outcome.status == "pending" and outcome.request is not None
    assert (outcome.request.kind, outcome.request.prompt) == ("a2a", "Which size?")
    assert outcome.request.data == {"taskId": "t1", "contextId": "c1", "url": PEER.url, "data": {"sizes": ["S", "M"]}}


@pytest.mark.parametrize("state", ["FAILED", "REJECTED", "CANCELED"])
def test_a_task_that_ends_otherwise_is_an_error_naming_the_peer_and_the_reason(state: str) -> None:
    outcome = follow({"task": {"id": "t1", "status": status(state, {"text": "no stock"})}}).outcome(PEER)
    assert outcome.status == "error"
    assert outcome.text == f"a2a peer http://peer.example/a2a: task t1 ended TASK_STATE_{state}: no stock"


@pytest.mark.parametrize("result", [5, {}, {"task": {"id": "t1"}}, {"artifactUpdate": {"taskId": "t1"}}])
def test_a_result_that_is_not_a2a_is_refused(result: Any) -> None:
    with pytest.raises(PeerError):
        Tracker().take(result)


def test_an_answer_goes_back_as_its_text_and_its_json() -> None:
    given = answer_parts(Answer(id="r1", ok=True, data={"text": "size M"}))
    assert given == [{"text": "size M"}, {"data": {"id": "r1", "ok": True, "data": {"text": "size M"}}}]
    assert answer_parts(Answer(id="r1", ok=True))[0] == {"text": "approved"}
    assert answer_parts(Answer(id="r1", ok=False, reason="no"))[0] == {"text": "declined"}


def test_a_card_is_read_for_its_json_rpc_interface_of_a2a_1() -> None:
    card = {
        "name": "far",
        "capabilities": {"streaming": True},
        "supportedInterfaces": [
            {"url": "grpc://peer.example", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
    }
    assert read_card(card, PEER) == Card("far", "http://peer.example/rpc", True)
    with pytest.raises(PeerError, match="no JSON-RPC interface of A2A 1.x"):
        read_card({"supportedInterfaces": card["supportedInterfaces"][:2]}, PEER)
