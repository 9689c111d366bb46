"""Team files are code, and are refused when they ask for what they cannot mean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolnexus.cli.commands import TeamFileError, load_team, main

TIMEOUT = 60


def write_team(folder: Path, text: str) -> Path:
    team = folder / "team.toml"
    team.write_text(text)
    return team


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("max_concurrent = 0", "max_concurrent must be >= 1"),
        ("max_tokens = -5", "max_tokens must be a whole number >= 0"),
        ("max_children = -1", "max_children must be a whole number >= 0"),
        ("max_tokenz = 5", "unknown key(s) max_tokenz"),
    ],
)
def test_a_team_file_budget_it_cannot_mean_is_refused(tmp_path: Path, budget: str, expected: str) -> None:
    team = write_team(tmp_path, f'[agents.lead]\ndoes = "Leads"\nteam = ["helper"]\n[agents.lead.budget]\n{budget}\n[agents.helper]\ndoes = "Helps"\n')
    with pytest.raises(TeamFileError) as caught:
        load_team(str(team))
    assert str(team) in str(caught.value) and expected in str(caught.value)


def test_a_team_file_budget_of_zero_children_is_kept(tmp_path: Path) -> None:
    team = write_team(tmp_path, '[agents.a]\ndoes = "x"\n[agents.a.budget]\nmax_children = 0\n')
    assert load_team(str(team)).registry["a"].budget.max_children == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[agents."boss/worker"]\ndoes = "x"\n', "agent name 'boss/worker'"),
        ('[agents."a.1"]\ndoes = "x"\n', "agent name 'a.1'"),
        ('[connection]\nretries = -1\n[agents.a]\ndoes = "x"\n', "retries must be a whole number >= 0"),
        ('[connection]\ntimeout = 0\n[agents.a]\ndoes = "x"\n', "timeout must be a finite number of seconds > 0"),
        ('[connection]\nbase_url = 5\n[agents.a]\ndoes = "x"\n', "base_url must be a string"),
    ],
)
def test_a_team_file_definition_it_cannot_mean_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(TeamFileError, match=expected.replace(".", r"\.")):
        load_team(str(write_team(tmp_path, text)))


def test_a_team_agent_with_a_tool_of_its_own_named_task_is_refused(tmp_path: Path) -> None:
    (tmp_path / "own_tools.py").write_text("def task(what: str) -> str:\n    'Tracks a task.'\n    return what\n")
    team = write_team(tmp_path, '[agents.lead]\ndoes = "x"\nteam = ["helper"]\ntools = ["own_tools:task"]\n[agents.helper]\ndoes = "y"\n')
    with pytest.raises(TeamFileError, match=r"\[agents\.lead\].*'task'"):
        load_team(str(team))


@pytest.mark.parametrize("name", ["HOME", "DATABASE_URL", "PATH", "my_api_key", "AWS_REGION", "KEY"])
def test_api_key_env_must_name_a_key_variable(tmp_path: Path, name: str) -> None:
    team = write_team(tmp_path, f'[connection]\napi_key_env = "{name}"\n[agents.a]\ndoes = "x"\n')
    with pytest.raises(TeamFileError, match="api_key_env .* is not a key variable"):
        load_team(str(team))


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "GROQ_API_KEY", "MY_PROVIDER_KEY", "HF_TOKEN", "TEAM2_KEY"])
def test_api_key_env_accepts_key_variables(tmp_path: Path, name: str) -> None:
    team = write_team(tmp_path, f'[connection]\napi_key_env = "{name}"\n[agents.a]\ndoes = "x"\n')
    assert load_team(str(team)).connection["api_key_env"] == name


def test_api_key_env_never_sends_another_variable_as_the_bearer_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://admin:hunter2@db/prod")
    team = write_team(tmp_path, '[connection]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key_env = "DATABASE_URL"\n[agents.a]\ndoes = "x"\n')
    assert main(["run", str(team), "hello", "--no-tree", "--no-input"]) == 1
    err = capsys.readouterr().err
    assert "is not a key variable" in err and "hunter2" not in err


def test_a_module_next_to_the_team_file_does_not_shadow_an_installed_package(tmp_path: Path) -> None:
    (tmp_path / "requests.py").write_text("raise SystemExit('the team folder shadowed requests')\n")
    (tmp_path / "lookups.py").write_text("import requests\n\ndef where() -> str:\n    'Where requests lives.'\n    return requests.__file__\n")
    team = write_team(tmp_path, '[agents.a]\ndoes = "x"\ntools = ["lookups:where"]\n')
    script = (
        "import sys\n"
        "from toolnexus.cli.teamfile import load_team\n"
        f"tool = load_team({str(team)!r}).registry['a'].tools[0]\n"
        "print(tool.execute({}, None))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT, cwd=str(Path(__file__).parent))
    assert proc.returncode == 0, proc.stderr
    assert "site-packages" in proc.stdout or "dist-packages" in proc.stdout
    assert str(tmp_path) not in proc.stdout


def test_modules_next_to_the_team_file_are_still_importable_after_installed_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "neighbour_tools_7f3a.py").write_text("def shout(text: str) -> str:\n    'Shouts.'\n    return text.upper()\n")
    team = write_team(tmp_path, '[agents.a]\ndoes = "x"\ntools = ["neighbour_tools_7f3a:shout"]\n')
    assert load_team(str(team)).registry["a"].tools[0].name == "shout"
    assert sys.path.index(str(tmp_path)) > max(i for i, entry in enumerate(sys.path) if entry.endswith("-packages"))


def test_run_help_says_team_files_are_code() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolnexus", "run", "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    help_text = " ".join(proc.stdout.split())
    assert "A team file is code" in help_text and 'tools = ["module:attr"] imports and runs' in help_text
    assert "_KEY or _TOKEN" in help_text
