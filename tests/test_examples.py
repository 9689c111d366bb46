"""Every runnable script in examples/ exits 0 and ends with an "OK"/"ok: ..." line.

Scripts whose names start with ``flask_`` are exercised elsewhere, and ``_``-prefixed files
are helpers rather than examples; both are skipped here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith(("flask_", "_")))
TIMEOUT_S = 60


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    detail = f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}\n{detail}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"{script.name} printed nothing\n{detail}"
    assert lines[-1].strip().lower().startswith("ok"), f"{script.name}: last line is {lines[-1]!r}\n{detail}"
