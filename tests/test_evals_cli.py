"""``toolnexus eval TEAM.toml CASES.jsonl``: the report printed and written, exit 0/2/1,
``--baseline``, ``--scorer module:attr`` and the progress line on a terminal (CONTRACT §23)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from toolnexus.cli.commands import main
from toolnexus.evals import Report
from toolnexus.testing import ScriptedLLMServer, last_user_text, text_completion

TIMEOUT = 60
Server = ScriptedLLMServer  # the scripted model endpoint every test here talks to
CASES = [
    {"name": "paris", "prompt": "paris", "expected": "PARIS"},
    {"name": "rome", "prompt": "rome", "expected": "ROME", "metadata": {"continent": "europe"}},
    {"name": "lima", "prompt": "lima", "expected": "LIMA"},
]


def capitals(body: dict[str, Any]) -> dict[str, Any]:
    """Answers in capitals; ``boom`` breaks the server (HTTP 500); ``wrong`` answers wrong."""
    prompt = last_user_text(body)
    if prompt == "boom":
        raise RuntimeError("the server broke")
    return text_completion(body, "nope" if prompt == "wrong" else prompt.upper())


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(capitals) as srv:
        yield srv


def team_file(folder: Path, base_url: str) -> Path:
    team = folder / "team.toml"
    team.write_text(
        f'entry = "lead"\n[connection]\nbase_url = "{base_url}"\nmodel = "m"\nretries = 0\n'
        '[prices.m]\ninput = 1.0\noutput = 2.0\n'
        '[agents.lead]\ndoes = "Answers"\n[agents.helper]\ndoes = "Helps"\nsoul = "You help."\n'
    )
    return team


def cases_file(folder: Path, cases: list[dict[str, Any]], name: str = "cases.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(case) + "\n" for case in cases))
    return path


def run(*args: str | Path) -> tuple[int, str, str]:
    """``toolnexus ARGS`` in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(arg) for arg in args])
    return status, out.getvalue(), err.getvalue()


def test_every_case_done_prints_the_table_writes_the_json_and_exits_0(tmp_path: Path, server: Server) -> None:
    out = tmp_path / "report.json"
    team, cases = team_file(tmp_path, server.base_url), cases_file(tmp_path, CASES)
    status, printed, errors = run("eval", team, cases, "--json", out)
    assert status == 0, errors
    assert printed.splitlines()[0] == "| case | status | exact | tokens | cost | latency |"
    assert "| rome | done | 1.00 | 15 |" in printed and "**3 cases**, 0 errors" in printed
    saved = Report.from_json(out.read_text())
    assert [case.name for case in saved.cases] == ["paris", "rome", "lima"]
    assert saved.cases[1].metadata == {"continent": "europe"} and saved.cases[1].cost == pytest.approx(20 / 1e6)
    assert errors == ""  # no progress line: stderr is not a terminal


def test_a_case_that_does_not_end_done_exits_2(tmp_path: Path, server: Server) -> None:
    cases = cases_file(tmp_path, [*CASES, {"name": "broken", "prompt": "boom"}])
    status, printed, _ = run("eval", team_file(tmp_path, server.base_url), cases, "--workers", "2")
    assert status == 2
    assert "| broken | error |" in printed and "| LLMError: model call to" in printed


def test_a_regression_against_the_baseline_exits_2_and_is_listed(tmp_path: Path, server: Server) -> None:
    team = team_file(tmp_path, server.base_url)
    baseline = tmp_path / "baseline.json"
    assert run("eval", team, cases_file(tmp_path, CASES), "--json", baseline)[0] == 0
    assert run("eval", team, cases_file(tmp_path, CASES), "--baseline", baseline)[0] == 0  # the same again
    changed = [dict(CASES[0], prompt="wrong"), *CASES[1:], {"name": "extra", "prompt": "x", "expected": "X"}]
    status, printed, _ = run("eval", team, cases_file(tmp_path, changed), "--baseline", baseline)
    assert status == 2
    assert "**Against the baseline:** 1 regressions, 0 improvements" in printed
    assert "- regression: paris exact 1.00 → 0.00" in printed and "- added: extra" in printed


def test_a_scorer_module_attr_is_imported_from_beside_the_team_file(tmp_path: Path, server: Server) -> None:
    (tmp_path / "my_scorers.py").write_text(
        "def shouting(case, result):\n    return result.text.isupper()\n\n"
        "def length(case, result):\n    return len(result.text) / 10\n"
    )
    status, printed, errors = run(
        "eval", team_file(tmp_path, server.base_url), cases_file(tmp_path, CASES),
        "--scorer", "my_scorers:shouting", "--scorer", "my_scorers:length", "--scorer", "contains",
    )
    assert status == 0, errors
    assert printed.splitlines()[0] == "| case | status | shouting | length | contains | tokens | cost | latency |"
    assert "| paris | done | 1.00 | 0.50 | 1.00 |" in printed


def test_the_agent_option_picks_another_agent_of_the_team(tmp_path: Path, server: Server) -> None:
    team, cases = team_file(tmp_path, server.base_url), cases_file(tmp_path, CASES)
    status, _, errors = run("eval", team, cases, "--agent", "helper")
    assert status == 0, errors
    assert server.last_body is not None
    assert server.last_body["messages"][0] == {"role": "system", "content": "You help."}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (["--agent", "nobody"], "has no agent 'nobody' (agents: helper, lead)"),
        (["--scorer", "fuzzy"], "--scorer 'fuzzy': use exact, contains or MODULE:ATTR"),
        (["--scorer", "no_such_module:x"], "cannot load scorer 'no_such_module:x'"),
        (["--scorer", "exact", "--scorer", "exact"], "two scorers are named 'exact'"),
        (["--workers", "0"], "max_workers must be a whole number >= 1"),
        (["--baseline", "missing.json"], "missing.json: cannot read the baseline"),
    ],
)
def test_what_cannot_run_exits_1_with_one_line(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch, change: list[str], problem: str
) -> None:
    monkeypatch.chdir(tmp_path)
    status, printed, errors = run("eval", team_file(tmp_path, server.base_url), cases_file(tmp_path, CASES), *change)
    assert status == 1 and printed == ""
    assert errors.startswith("toolnexus: error: ") and problem in errors and errors.count("\n") == 1


def test_bad_files_exit_1_naming_the_file(tmp_path: Path, server: Server) -> None:
    team = team_file(tmp_path, server.base_url)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "a", "prompt": "q"}\n{"name": "a", "prompt": "q"\n')
    status, _, errors = run("eval", team, bad)
    assert status == 1 and f"{bad} line 2: invalid JSON" in errors
    not_a_report = tmp_path / "old.json"
    not_a_report.write_text("[1, 2]")
    status, _, errors = run("eval", team, cases_file(tmp_path, CASES), "--baseline", not_a_report)
    assert status == 1 and "not a report written by --json" in errors
    status, _, errors = run("eval", tmp_path / "none.toml", cases_file(tmp_path, CASES))
    assert status == 1 and "cannot read the team file" in errors


def test_the_command_shows_progress_on_a_terminal_and_prints_no_traceback(tmp_path: Path, server: Server) -> None:
    team, cases = team_file(tmp_path, server.base_url), cases_file(tmp_path, CASES)
    main_fd, side = pty.openpty()
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    proc = subprocess.run(
        [sys.executable, "-m", "toolnexus", "eval", str(team), str(cases)],
        stdout=subprocess.PIPE, stderr=side, stdin=subprocess.DEVNULL, text=True, timeout=TIMEOUT, env=env,
    )
    os.close(side)
    drawn = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    os.close(main_fd)
    assert proc.returncode == 0
    assert drawn.decode().startswith("\r0/3") and "\r3/3" in drawn.decode()
    assert "\r" not in proc.stdout and "| lima | done |" in proc.stdout
    piped = subprocess.run(
        [sys.executable, "-m", "toolnexus", "eval", str(team), str(tmp_path / "none.jsonl")],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert piped.returncode == 1 and piped.stderr.startswith("toolnexus: error: ") and "Traceback" not in piped.stderr
