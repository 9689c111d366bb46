"""AG-UI: a team behind a CopilotKit-style front end, from a Flask or Django app (CONTRACT §21).

A front end speaking AG-UI 1.0 (``@ag-ui/client``'s ``HttpAgent``, CopilotKit) POSTs a
``RunAgentInput``; the agent answers that one run as Server-Sent Events. Here that is
synchronous WSGI, with no new dependency::

    from toolnexus import agui

    app.register_blueprint(agui.blueprint(rt, agent="assistant", authorize=current_user))

or, in a view of your own (authorization is then the view's)::

    frames = agui.stream(rt, request.get_data(), agent="assistant", principal=user)
    return Response(frames, headers=agui.HEADERS)

- **A thread is a conversation.** A ``threadId`` names one handle of ``agent`` under the
  root, bound to the principal that started it (another principal's is not found). Its
  first run spawns the handle; each later run, on any worker process with a state, wakes
  the same handle on the text of the input's last ``user`` message (its stored transcript
  is the history; the rest of the input's messages are not replayed to the model).
- **A run's events**: ``RUN_STARTED``, a ``STATE_SNAPSHOT`` of the handle tree, the run's
  text, tool calls and results, each teammate as a ``SUBAGENT_STARTED … FINISHED`` span
  whose events carry its ``subagentRunId``, ``STATE_DELTA`` patches, and last exactly one
  ``RUN_FINISHED`` (outcome ``success``, ``interrupt`` or ``cancelled``) or ``RUN_ERROR``.
- **Approvals** end the run with an ``interrupt`` outcome; the next input's ``resume``
  entries answer them, on any worker. **Frontend tools** (the input's ``tools``) are offered
  to the thread's agent; a call to one ends the run with ``pendingToolCallIds``, and the next
  input's ``tool`` messages are the results. No thread is held while a person decides.
- **Input is checked before anything starts**: ``AGUIInputError`` (``status`` 400, 404,
  409 or 422, and a ``reason``) is raised before ``events``/``stream`` return.
- **A client that goes** (``abortRun``) interrupts the thread's turn; it can run again.
"""

from __future__ import annotations

from ..errors import AGUIInputError
from ._calls import HEADERS, KEEP_ALIVE, events, frame, frames, prepare, stream
from ._run import PROTOCOL_VERSION
from ._thread import SURFACE
from ._web import blueprint, django_view

__all__ = [
    "AGUIInputError",
    "HEADERS",
    "KEEP_ALIVE",
    "PROTOCOL_VERSION",
    "SURFACE",
    "blueprint",
    "django_view",
    "events",
    "frame",
    "frames",
    "prepare",
    "stream",
]
