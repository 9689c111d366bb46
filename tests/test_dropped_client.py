"""A client dropped without ``close`` and collected by the garbage collector while another
client is being built must not deadlock the process (its finaliser releases the shared
session the other one is leasing, on the same thread)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc
from toolnexus import Client, LLMError
from toolnexus.testing import ScriptedLLMServer
try:
    Client(base_url="http://127.0.0.1:9/v1", model="m", retries=0).run("hello")  # dropped unclosed, kept by a cycle
except LLMError:
    pass
gc.disable()  # the collection then happens in the middle of the next lease
with ScriptedLLMServer() as server:
    gc.enable()
    Client(base_url=server.base_url, model="m").close()
print("no deadlock")
"""


def test_a_dropped_client_collected_while_another_is_built_does_not_deadlock():
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no deadlock" in done.stdout
