"""Replay and fork (CONTRACT §23): a settled run re-run with today's code while its journal
answers every model step, and a recorded run continued from one of its steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _durable_team import files, state  # noqa: F401 - fixtures
from _replay_team import model, registry
from _teamfiles import write_team
from toolnexus.cli import main
from toolnexus.cli.teamfile import load_team
from toolnexus import (
    Budget, ConfigError, Divergence, ReplayError, ReplayReport, Runtime, UnknownHandle, UnknownRequest, make_answer,
)

HERE = Path(__file__).resolve().parent
HANG = 10.0
LEAD, MID, LEAF = "root/lead.1", "root/lead.1/mid.1", "root/lead.1/mid.1/leaf.1"


def record(rt: Runtime, answer: bool = True) -> str:
    """Run the team once: lead → mid (a lookup, then leaf) → leaf asks, a person answers."""
    h = rt.spawn(rt.root, "lead")
    rt.wake(h, "go")
    assert rt.wait(h, timeout=HANG).status == "pending"
    [request] = rt.open_requests()
    rt.resume(make_answer(request.id, ok=answer, data="yes", reason="no"))
    assert rt.wait(h, timeout=HANG).status == "done"
    return h.id


@pytest.fixture
def team(state, files):  # noqa: F811 - the fixture imported above
    """A stored run of the team (SQLite and PostgreSQL), and where it is."""
    generate = model()
    with Runtime(registry(), generate=generate, state=state, runtime_id=files.runtime_id, inline=True) as rt:
        run = record(rt)
    return state, files.runtime_id, run, generate


def replayer(team, **changes):
    state, runtime_id, _, _ = team
    return Runtime(registry(**changes), state=state, runtime_id=runtime_id)


# --- replay --------------------------------------------------------------------------------------


def test_replay_of_a_three_level_team_with_an_approval_asks_no_model_in_another_process(team):
    state, runtime_id, run, generate = team
    script = [sys.executable, str(HERE / "_replay_team.py"), state, runtime_id, run]
    done = subprocess.run(script, capture_output=True, text=True, timeout=60, cwd=str(HERE))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"same": True, "steps": 6, "text": "lead: mid: found:x | leaf: approved:yes",
                      "status": "done", "tokens": 90}
    assert generate.calls == {"m-lead": 2, "m-mid": 2, "m-leaf": 2}  # the recording's, nothing more


def test_replay_reports_the_run_recorded_result_and_totals(team):
    with replayer(team) as rt:
        report = rt.replay(team[2])
        view = rt.inspect(team[2])
    assert isinstance(report, ReplayReport)
    assert (report.same, report.divergence, report.steps) == (True, None, 6)
    assert report.result.text == "lead: mid: found:x | leaf: approved:yes"
    assert (report.tokens, report.cost) == (view.tokens, view.cost)
    assert str(report) == "root/lead.1: same (6 steps replayed)"


def test_a_changed_soul_diverges_at_the_first_request_of_its_handle(team):
    with replayer(team, lead_soul="You lead boldly.") as rt:
        report = rt.replay(team[2])
    assert not report.same
    assert report.divergence == Divergence(
        handle=LEAD, step=1, kind="request", field="messages[0].content", recorded="You lead.",
        actual="You lead boldly.",
    )
    assert str(report.divergence) == "root/lead.1 step 1: request differs at messages[0].content"


def test_a_changed_tool_description_diverges_at_the_handle_that_sees_it(team):
    with replayer(team, lookup_description="Finds anything.") as rt:
        divergence = rt.replay(team[2]).divergence
    assert (divergence.handle, divergence.step, divergence.kind) == (MID, 1, "request")
    assert divergence.field == "tools[0].function.description"
    assert (divergence.recorded, divergence.actual) == ("Looks a thing up.", "Finds anything.")


def test_live_tools_diverge_at_the_result_of_a_changed_tool(team):
    with replayer(team, lookup_fn=lambda args, ctx: f"nothing for {args['q']}") as rt:
        assert rt.replay(team[2]).same  # recorded results: the tool does not run
        divergence = rt.replay(team[2], tools="live").divergence
    assert (divergence.handle, divergence.step, divergence.kind, divergence.call_id) == (MID, 1, "tool_result", "m1")
    assert divergence.field == "output"
    assert divergence.recorded == {"output": "found:x", "is_error": False}
    assert divergence.actual == {"output": "nothing for x", "is_error": False}


def test_live_tools_give_a_tool_that_asks_its_recorded_answer(team):
    with replayer(team) as rt:
        report = rt.replay(team[2], tools="live")
    assert report.same and report.steps == 6


def test_a_run_that_ends_sooner_now_diverges_at_the_end(team):
    with replayer(team, lead_budget=Budget(max_turns=1)) as rt:  # today: one model call a turn
        divergence = rt.replay(team[2]).divergence
    assert (divergence.handle, divergence.step, divergence.kind) == (LEAD, 2, "end")
    assert divergence.recorded["messages"][-1]["role"] == "tool"


def test_replay_writes_nothing():
    with Runtime(registry(), generate=model(), inline=True) as rt:
        run = record(rt)
        before = (rt.events(), rt.handles(), rt.inspect(run), rt.conversation_store.get(run))
        rt.replay(run, tools="live")
        assert (rt.events(), rt.handles(), rt.inspect(run), rt.conversation_store.get(run)) == before


def test_replay_refuses_what_it_cannot_replay():
    with Runtime(registry(), generate=model(), inline=True) as rt:
        h = rt.spawn(rt.root, "lead")
        rt.wake(h, "go")
        assert rt.wait(h, timeout=HANG).status == "pending"
        with pytest.raises(ReplayError, match="root/lead.1"):
            rt.replay(h)  # suspended
        with pytest.raises(UnknownHandle):
            rt.replay("root/nobody.1")
        with pytest.raises(ConfigError, match="tools"):
            rt.replay(h, tools="some")
        idle = rt.spawn(rt.root, "mid")
        with pytest.raises(ReplayError, match="no journal"):
            rt.replay(idle)


def test_a_run_is_kept_for_replay_until_it_is_pruned():
    with Runtime(registry(), generate=model(), inline=True) as rt:
        run = record(rt)
        rt.close(run)
        assert rt.replay(run).same  # its turns settled long ago: the journal is still there
        rt.prune(0)
        with pytest.raises(UnknownHandle):
            rt.replay(run)


# --- fork ----------------------------------------------------------------------------------------


def test_fork_with_a_different_answer_takes_the_other_branch(team):
    state, runtime_id, run, _ = team
    generate = model()
    with Runtime(registry(), generate=generate, state=state, runtime_id=runtime_id, inline=True) as rt:
        before = (rt.inspect(LEAF), rt.wait(LEAF), rt.conversation_store.get(LEAF))
        asked = _request_of(rt, LEAF)
        fork = rt.fork(LEAF, answer=make_answer(asked, ok=False, reason="not today"))
        result = rt.wait(fork, timeout=HANG)
        assert (fork.id, result.status, result.text) == ("root/leaf.2", "done", "leaf: not today: ship it?")
        assert generate.calls == {"m-leaf": 1}  # the step that asked is the record's; the next one is live
        assert (rt.inspect(LEAF), rt.wait(LEAF), rt.conversation_store.get(LEAF)) == before
        assert rt.replay(LEAF).same and rt.replay(fork).same


def test_fork_at_a_step_asks_from_that_step_on_and_charges_only_those(team):
    state, runtime_id, run, _ = team
    generate = model()
    with Runtime(registry(), generate=generate, state=state, runtime_id=runtime_id, inline=True) as rt:
        fork = rt.fork(run, at=2)
        result = rt.wait(fork, timeout=HANG)
        assert result.text == "lead: mid: found:x | leaf: approved:yes"  # the task call's result is recorded
        assert generate.calls == {"m-lead": 1}
        assert (result.turns, rt.inspect(fork).tokens) == (2, 15)


def test_fork_with_a_prompt_replaces_the_input_of_a_turn():
    generate = model()
    with Runtime(registry(), generate=generate, inline=True) as rt:
        run = record(rt)
        fork = rt.fork(run, prompt="go elsewhere")
        assert rt.wait(fork, timeout=HANG).status == "pending"  # all live: the leaf asks again
        assert generate.requests[-3]["messages"][-1] == {"role": "user", "content": "go elsewhere"}


def test_fork_refuses_bad_points():
    with Runtime(registry(), generate=model(), inline=True) as rt:
        run = record(rt)
        with pytest.raises(ReplayError, match="at must be a step from 1 to 3"):
            rt.fork(run, at=4)
        with pytest.raises(ReplayError, match="does not start a turn"):
            rt.fork(run, at=2, prompt="again")
        with pytest.raises(ConfigError):
            rt.fork(run, at=1, answer=make_answer("x", ok=True))
        with pytest.raises(UnknownRequest):
            rt.fork(run, answer=make_answer("req_none", ok=True))
        with pytest.raises(UnknownHandle):
            rt.fork("root/nobody.1")


def _request_of(rt, handle_id):
    """The id of the request ``handle_id`` asked (from its journal, as a fork finds it)."""
    from toolnexus._run.recorded import recorded_turns
    from toolnexus._team.port import port_of

    [turn] = recorded_turns(port_of(rt).tree_store.journal.rows(handle_id))
    [[(request, _)]] = turn.answers.values()
    return request.id


# --- the command line ----------------------------------------------------------------------------


def _team_file(folder: Path, lead_soul: str = "You lead.") -> Path:
    agents = {
        "lead": {"does": "leads", "soul": lead_soul, "model": "m-lead", "team": ["mid"]},
        "mid": {"does": "researches", "soul": "You research.", "model": "m-mid", "team": ["leaf"],
                "tools": ["_replay_team:LOOKUP"]},
        "leaf": {"does": "ships", "soul": "You ship.", "model": "m-leaf", "tools": ["_replay_team:APPROVE"]},
    }
    return write_team(folder, "lead", agents)


def test_the_replay_command_says_same_or_where_the_run_diverged(tmp_path, capsys):
    team_file, db = _team_file(tmp_path), str(tmp_path / "runs.db")
    with Runtime(load_team(str(team_file)).registry, generate=model(), state=db, model="m", inline=True) as rt:
        run = record(rt)
    assert main(["replay", str(team_file), run, "--state", db]) == 0
    assert capsys.readouterr().out == "same: root/lead.1, 6 model steps replayed\n"
    _team_file(tmp_path, lead_soul="You lead boldly.")
    assert main(["replay", str(team_file), run, "--state", db]) == 3
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["diverged: root/lead.1, step 1, request", "  field:    messages[0].content"]
    assert main(["replay", str(team_file), run, "--state", db, "--json"]) == 3
    body = json.loads(capsys.readouterr().out)
    assert set(body) == {"run", "same", "divergence", "status", "text", "tokens", "cost", "steps"}
    assert (body["same"], body["divergence"]["kind"], body["divergence"]["handle"]) == (False, "request", run)
    assert body["text"] == "lead: mid: found:x | leaf: approved:yes"


def test_the_replay_command_needs_a_state_and_a_known_run(tmp_path, capsys):
    team_file = _team_file(tmp_path)
    assert main(["replay", str(team_file), "root/lead.1"]) == 1
    assert "no state" in capsys.readouterr().err
    assert main(["replay", str(team_file), "root/lead.1", "--state", str(tmp_path / "none.db")]) == 1
