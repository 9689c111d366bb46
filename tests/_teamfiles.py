"""Team files the command-line tests write: the TOML, with a module of tools beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: A ``deploy`` tool that asks a person first (a ``Request`` of kind ``approval``).
APPROVAL_TOOLS = '''
from toolnexus import ToolContext, make_request, suspend, tool

@tool
def deploy(service: str, ctx: ToolContext):
    """Deploy a service; needs approval."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Deploy {service} to production?"))
    return f"deployed {service}"
'''


def write_team(folder: Path, entry: str, agents: dict[str, dict[str, Any]], *, tools: tuple[str, str] | None = None) -> Path:
    """``folder/team.toml`` on the model ``m`` (no retries) with ``agents`` (each a table of
    its keys), and ``tools``, ``(module name, source)``, written beside it."""
    lines = [f"entry = {json.dumps(entry)}", "[connection]", 'model = "m"', "retries = 0"]
    for name, keys in agents.items():
        lines.append(f"[agents.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    if tools is not None:
        (folder / f"{tools[0]}.py").write_text(tools[1])
    path = folder / "team.toml"
    path.write_text("\n".join(lines) + "\n")
    return path
