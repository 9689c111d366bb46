"""The documentation collector itself (``_docs.py``, ``test_docs.py``): a broken block, a
wrong printed line, an install line of the other package and an unknown flag all fail;
the markers do what they say."""

from __future__ import annotations

from pathlib import Path

import pytest

import _docs
from test_docs import run_chain

FENCE = "```"


def page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text.replace("'''", FENCE), encoding="utf-8")
    return path


def only_block(path: Path) -> _docs.Block:
    return _docs.python_blocks([path])[-1]


def test_a_broken_block_fails_naming_its_page_and_line(tmp_path: Path) -> None:
    path = page(tmp_path, "# A page\n\n'''python\nfrom toolnexus import Client\n\nClient(generate=print, modle='m')\n'''\n")
    with pytest.raises(AssertionError, match="page.md:4 failed") as failure:
        run_chain(only_block(path), tmp_path)
    assert 'page.md", line 6' in str(failure.value)
    assert "modle" in str(failure.value)


def test_a_block_that_prints_something_else_than_its_comment_says_fails(tmp_path: Path) -> None:
    path = page(tmp_path, "'''python\nprint(2 + 2)  # 5\n'''\n")
    with pytest.raises(AssertionError, match="does not print '5'"):
        run_chain(only_block(path), tmp_path)


def test_a_block_that_prints_what_its_comments_say_passes(tmp_path: Path) -> None:
    path = page(tmp_path, "'''python\nprint('a')\nfor n in (1, 2):\n    print(n * 2)  # 4\nprint('end')  # end\n'''\n")
    run_chain(only_block(path), tmp_path)


def test_continue_runs_the_blocks_before_it_in_one_interpreter(tmp_path: Path) -> None:
    text = "'''python\nx = 1\n'''\n\n'''python\nx = 40\n'''\n\n<!-- docs: continue -->\n'''python\nprint(x + 2)  # 42\n'''\n"
    blocks = _docs.python_blocks([page(tmp_path, text)])
    assert [len(_docs.chain(block)) for block in blocks] == [1, 1, 2]
    run_chain(blocks[-1], tmp_path)
    with pytest.raises(AssertionError, match="NameError"):
        run_chain(_docs.Block(blocks[-1].path, blocks[-1].line, "python", "print(x)\n"), tmp_path)


def test_an_endpoint_block_runs_against_a_scripted_server_that_calls_its_tool(tmp_path: Path) -> None:
    code = """from toolnexus import Client, tool

@tool
def word_count(text: str) -> int:
    \"\"\"Count the words in a text.\"\"\"
    return len(text.split())

client = Client(base_url="http://localhost:11434/v1", model="llama3.1")
result = client.run("How many words?", [word_count])
assert result.text == "done: 6", result.text
"""
    path = page(tmp_path, f"<!-- docs: endpoint -->\n'''python\n{code}'''\n")
    run_chain(only_block(path), tmp_path)


def test_a_block_that_requires_a_missing_part_skips(tmp_path: Path) -> None:
    path = page(tmp_path, "<!-- docs: requires=toolnexus.no_such_module,toolnexus.Runtime -->\n'''python\nraise SystemExit(1)\n'''\n")
    with pytest.raises(pytest.skip.Exception, match="toolnexus.no_such_module"):
        run_chain(only_block(path), tmp_path)
    assert _docs.missing_requirement("toolnexus.Runtime.no_such_verb")
    assert not _docs.missing_requirement("toolnexus.Runtime.wake")
    assert not _docs.missing_requirement("cli.show")
    assert _docs.missing_requirement("cli.no_such_command")


def test_a_file_block_is_written_for_the_blocks_after_it(tmp_path: Path) -> None:
    text = "<!-- docs: file=helper.py -->\n'''python\nVALUE = 7\n'''\n\n<!-- docs: continue -->\n'''python\nimport helper\nprint(helper.VALUE)  # 7\n'''\n"
    blocks = _docs.python_blocks([page(tmp_path, text)])
    assert len(blocks) == 1
    run_chain(blocks[0], tmp_path)


def test_a_block_indented_in_a_list_is_collected_without_its_indent(tmp_path: Path) -> None:
    path = page(tmp_path, "- a step:\n\n    '''python\n    print('in a list')  # in a list\n    '''\n")
    block = only_block(path)
    assert block.code == "print('in a list')  # in a list\n"
    run_chain(block, tmp_path)


def test_installing_the_name_on_pypi_is_refused() -> None:
    for line in ("pip install toolnexus", "pip install 'toolnexus[postgres]'", "pip install -U toolnexus==0.1.0", "pip install"):
        assert _docs.pip_problem(line) is not None, line
    for line in ("pip install -e .", "pip install -e '.[postgres]'", "pip install '.[django,postgres]'", "pip install opentelemetry-exporter-otlp"):
        assert _docs.pip_problem(line) is None, line


def test_install_lines_are_found_in_shell_blocks_and_in_prose(tmp_path: Path) -> None:
    path = page(tmp_path, "Run `pip install 'toolnexus[otel]'` first.\n\n'''bash\npip install -e . && toolnexus demo --yes\n'''\n")
    assert _docs.pip_lines(path) == [(1, "pip install 'toolnexus[otel]'"), (4, "pip install -e .")]


def test_an_unknown_command_or_flag_is_refused(tmp_path: Path) -> None:
    path = page(tmp_path, "'''bash\ntoolnexus run team.toml 'hi' \\\n    --model m --bogus\npython -m toolnexus demo --yes\n'''\n")
    block = _docs.collect(path)[0]
    commands = _docs.command_lines(block)
    assert commands == [(2, ["run", "team.toml", "hi", "--model", "m", "--bogus"]), (4, ["demo", "--yes"])]
    assert _docs.command_problem(commands[0][1]) is not None
    assert _docs.command_problem(commands[1][1]) is None
    assert _docs.command_problem(["frobnicate"]) is not None


def test_broken_toml_is_refused(tmp_path: Path) -> None:
    block = _docs.collect(page(tmp_path, "'''toml\n[agents.lead\n'''\n"))[0]
    assert _docs.toml_problem(block) is not None


def test_a_text_block_marked_output_is_what_the_block_before_it_prints(tmp_path: Path) -> None:
    text = "'''python\nprint('one')\nprint('two')\n'''\n\n<!-- docs: output -->\n'''text\none\ntwo\n'''\n"
    block = only_block(page(tmp_path, text))
    assert block.printed == ["one", "two"]
    run_chain(block, tmp_path)
    block.printed.append("three")
    with pytest.raises(AssertionError, match="does not print 'three'"):
        run_chain(block, tmp_path)
