"""CONTRACT §22 "Calling a remote A2A agent as a teammate": an a2a-sdk 1.3.0 server (a small
AgentExecutor under uvicorn, in another process) is the remote teammate behind the
``task`` tool: its answer is the tool result, its input-required a pending ``Request``
answered by a person (in this process or another one), the parent's ``wait_for``, or
declined; an interrupt cancels its task; a failing or unreachable peer is an error result
naming its URL."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from _a2a_caller import model, registry
from _a2a_peer import TESTS, WAIT_S, SdkPeer, started_peer
from _gunicorn import free_port
from toolnexus import AgentDef, Answer, Runtime
from toolnexus.errors import ConfigError

pytest.importorskip("uvicorn")
pytest.importorskip("a2a.server")

@pytest.fixture(scope="module")
def peer() -> Iterator[SdkPeer]:
    with started_peer() as served:
        yield served


@pytest.fixture
def rt(peer: SdkPeer) -> Iterator[Runtime]:
    runtime = Runtime(registry(peer.url), generate=model())
    yield runtime
    runtime.close(runtime.root)


def remote_child(rt: Runtime) -> Any:
    return next(view for view in rt.handles() if view.name == "remote")


def test_a_remote_teammates_answer_is_the_task_result(rt: Runtime) -> None:
    result = rt.run_agent("boss", "echo please")
    assert result.status == "done"
    assert result.text == "boss: hello world"  # the artifact's two chunks, joined
    child = remote_child(rt)
    assert child.tokens == 0 and child.turns == 0


def test_a_bare_message_from_the_peer_is_the_answer(rt: Runtime) -> None:
    assert rt.run_agent("boss", "msg").text == "boss: plain reply"


def test_input_required_is_a_pending_a2a_request_that_a_person_answers(rt: Runtime, peer: SdkPeer) -> None:
    asked = rt.run_agent("boss", "ask for money")
    assert asked.status == "pending" and asked.pending is not None
    request = asked.pending
    assert request.kind == "a2a" and request.prompt == "Approve the transfer?"
    data = request.data or {}
    assert data["url"] == peer.url and data["taskId"] and data["contextId"]
    assert data["data"] == {"kind": "approval", "amount": 5.0}  # through protobuf: a float
    assert data["path"] == ["root", "boss.1", "remote.1"]
    rt.resume(Answer(id=request.id, ok=True, data={"text": "yes, send it"}))
    result = rt.wait(asked.handle_id, timeout=WAIT_S)
    assert result.status == "done" and result.text == "boss: answered: yes, send it"


def test_a_declined_request_goes_back_to_the_remote_task(rt: Runtime) -> None:
    asked = rt.run_agent("boss", "ask again")
    assert asked.pending is not None
    rt.resume(Answer(id=asked.pending.id, ok=False, reason="not today"))
    assert rt.wait(asked.handle_id, timeout=WAIT_S).text == "boss: answered: declined"


def test_the_parents_wait_for_answers_the_remote_agent(peer: SdkPeer) -> None:
    seen = []

    def approve(request: Any) -> Answer:
        seen.append(request)
        return Answer(id=request.id, ok=True, data={"text": "fine by me"})

    with Runtime(registry(peer.url, wait_for=approve), generate=model()) as rt:
        result = rt.run_agent("boss", "ask the parent")
    assert result.text == "boss: answered: fine by me"
    assert [request.kind for request in seen] == ["a2a"]


class RemoteTasks(logging.Handler):
    """The remote tasks the library says it follows (its debug log), waited for."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: list[str] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("a2a: %s follows the remote task"):
            with self.changed:
                self.found.append(str(record.args[1]))  # type: ignore[index]
                self.changed.notify_all()

    def followed(self, peer: SdkPeer) -> str:
        """The remote task the library follows (it is then in the turn's journal, and an
        interrupt cancels it), once the peer says it started it."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.found, timeout=WAIT_S), "no remote task was followed"
            task_id = self.found[0]
        assert peer.line(f"started {task_id}")
        return task_id


@pytest.fixture
def remote_tasks() -> Iterator[RemoteTasks]:
    logger = logging.getLogger("toolnexus")
    handler, level = RemoteTasks(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_interrupting_the_caller_cancels_the_remote_task(
    rt: Runtime, peer: SdkPeer, remote_tasks: RemoteTasks
) -> None:
    lead = rt.spawn(rt.root, "boss")
    rt.wake(lead, "wait for it")
    task_id = remote_tasks.followed(peer)
    rt.interrupt(lead)
    assert peer.line(f"canceled {task_id}")
    assert rt.wait(lead, timeout=WAIT_S).status == "interrupted"
    # the parent's interrupted turn ends its task child, as for a local teammate
    # (test_interrupt_close: idle, or closed when the task call closes it first)
    assert remote_child(rt).state in ("idle", "closed")


def test_closing_the_runtime_cancels_a_running_remote_task(peer: SdkPeer, remote_tasks: RemoteTasks) -> None:
    rt = Runtime(registry(peer.url), generate=model(), shutdown_timeout=0.5)
    lead = rt.spawn(rt.root, "boss")
    rt.wake(lead, "wait some more")
    task_id = remote_tasks.followed(peer)
    closer = threading.Thread(target=rt.close, args=(rt.root,))
    closer.start()
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert peer.line(f"canceled {task_id}")


@pytest.mark.parametrize(
    ("prompt", "said"),
    [
        ("fail now", "ended TASK_STATE_FAILED: it broke"),
        ("raise now", "SendStreamingMessage failed"),
    ],
)
def test_a_failing_remote_task_is_an_error_result_naming_the_peer(
    rt: Runtime, peer: SdkPeer, prompt: str, said: str
) -> None:
    result = rt.run_agent("boss", prompt)
    assert result.status == "done"  # the lead goes on; its teammate's failure is a result
    assert result.text.startswith(f"boss: [error] a2a peer {peer.url}")
    assert said in result.text


def test_an_unreachable_peer_is_an_error_result_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Runtime(registry(url), generate=model()) as rt:
        result = rt.run_agent("boss", "echo anyone")
    assert result.text == f"boss: [error] a2a peer {url}: connection refused"


def test_with_a_state_another_process_answers_the_same_remote_task(peer: SdkPeer, tmp_path: Path) -> None:
    state = str(tmp_path / "team.db")
    with Runtime(registry(peer.url), generate=model(), state=state) as rt:
        asked = rt.run_agent("boss", "ask across processes")
    assert asked.pending is not None
    task_id = (asked.pending.data or {})["taskId"]
    done = subprocess.run(
        [sys.executable, str(TESTS / "_a2a_caller.py"), "answer", state, peer.url, asked.pending.id, "yes"],
        capture_output=True, text=True, timeout=WAIT_S * 2,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "done" and result["text"] == "boss: answered: yes"
    with Runtime(registry(peer.url), generate=model(), state=state) as again:  # one remote task, from both processes
        assert [event["task"] for event in again.events() if event["event"] == "a2a_task"] == [task_id]


def test_a_turn_another_runtime_continues_follows_the_same_remote_task(
    peer: SdkPeer, tmp_path: Path, remote_tasks: RemoteTasks
) -> None:
    state = str(tmp_path / "team.db")
    first = Runtime(registry(peer.url), generate=model(), state=state, shutdown_timeout=0.5)
    lead = first.spawn(first.root, "boss")
    first.wake(lead, "hold on")
    task_id = remote_tasks.followed(peer)
    first.release()  # its process lets go: the turns are orphans, the remote task goes on
    with Runtime(registry(peer.url), generate=model(), state=state) as again:  # recovers the orphans
        requests.post(f"{peer.url}/release/{task_id}", timeout=WAIT_S).raise_for_status()
        assert again.wait(lead.id, timeout=WAIT_S).text == "boss: released"
        assert [event["task"] for event in again.events() if event["event"] == "a2a_task"] == [task_id]
    assert peer.lines().count(f"started {task_id}") == 1  # and released, not canceled: it completed


@pytest.mark.parametrize(
    "local", [{"model": "m"}, {"soul": "be nice"}, {"team": ("boss",)}, {"output": {"type": "object"}}]
)
def test_a_remote_teammate_with_a_model_of_its_own_is_a_config_error(local: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="remote A2A agent"):
        AgentDef("remote", "far away", a2a="http://example.com/a2a", **local)


@pytest.mark.parametrize("url", ["example.com", "ftp://example.com/", "", 5])
def test_a2a_that_is_not_an_http_url_is_a_config_error(url: Any) -> None:
    with pytest.raises(ConfigError):
        AgentDef("remote", "far away", a2a=url)


def test_a_team_file_and_agent_name_a_remote_teammate(peer: SdkPeer, tmp_path: Path) -> None:
    from _teamfiles import write_team

    from toolnexus import agent, a2a
    from toolnexus.cli.teamfile import load_team

    path = write_team(tmp_path, "remote", {"remote": {"does": "a remote agent", "a2a": peer.url}})
    remote = load_team(str(path)).registry["remote"]
    assert remote.a2a == a2a.Peer(peer.url)
    lead = agent("remote", does="a remote agent", a2a=a2a.Peer(peer.url, headers={"Authorization": "Bearer t"}))
    assert "Bearer" not in repr(lead.definition)  # credentials are never shown
    result = lead.run("echo from an agent", generate=model())  # no model is asked: the runtime needs one all the same
    assert result.status == "done" and result.text == "hello world" and result.total_tokens == 0


@pytest.mark.parametrize("stop", ["interrupt", "close"])
def test_interrupting_or_closing_a_run_whose_remote_teammate_asks_cancels_the_remote_task(
    rt: Runtime, peer: SdkPeer, stop: str
) -> None:
    asked = rt.run_agent("boss", f"ask and {stop}")
    assert asked.pending is not None
    task_id = (asked.pending.data or {})["taskId"]
    getattr(rt, stop)(asked.handle_id)
    assert peer.line(f"canceled {task_id}")
    assert rt.open_requests() == [] and remote_child(rt).state == ("idle" if stop == "interrupt" else "closed")


def test_closing_a_runtime_with_a_state_leaves_a_remote_task_that_asks_for_another_process(
    peer: SdkPeer, tmp_path: Path
) -> None:
    with Runtime(registry(peer.url), generate=model(), state=str(tmp_path / "team.db")) as rt:
        asked = rt.run_agent("boss", "ask and keep")
    assert asked.pending is not None
    task_id = (asked.pending.data or {})["taskId"]
    assert peer.state(task_id) == "TASK_STATE_INPUT_REQUIRED"  # closing the first runtime canceled nothing
    with Runtime(registry(peer.url), generate=model(), state=str(tmp_path / "team.db")) as again:
        assert [request.id for request in again.open_requests()] == [asked.pending.id]
        again.interrupt(asked.handle_id)  # this process gives up on it: now the remote task is canceled
    assert peer.line(f"canceled {task_id}")


def test_a_peer_that_does_not_stream_is_sent_plain_messages(peer: SdkPeer) -> None:
    with Runtime(registry(peer.url + "/plain"), generate=model()) as rt:
        assert rt.run_agent("boss", "echo plainly").text == "boss: hello world"
        asked = rt.run_agent("boss", "ask plainly")
        assert asked.pending is not None and asked.pending.kind == "a2a"
        rt.resume(Answer(id=asked.pending.id, ok=True, data={"text": "plain yes"}))
        assert rt.wait(asked.handle_id, timeout=WAIT_S).text == "boss: answered: plain yes"
