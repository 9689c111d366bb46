"""toolnexus: synchronous, thread-based LLM agents that delegate through a ``task`` tool."""

import logging

from ._team.level1 import Agent, agent
from ._team.agentdef import AgentDef
from ._run.client import Client
from .data import (
    AgentResult,
    Answer,
    Budget,
    Divergence,
    Event,
    HandleView,
    ReplayReport,
    Request,
    RunResult,
    ToolCallRecord,
    ToolResult,
    Usage,
    make_answer,
    make_request,
)
from .errors import (
    Cancelled,
    CassetteMismatch,
    ConfigError,
    DispatchError,
    HandleClosed,
    InboxFull,
    LLMError,
    ReplayError,
    SpawnError,
    StateError,
    ToolnexusError,
    UnknownHandle,
    UnknownRequest,
    WireError,
)
from ._team.handle import Handle
from .hooks import HookFunctions, HooksLike
from ._team.pool import WorkerPool
from ._team.runtime import Runtime
from ._stores.conversations import ConversationStore, InMemoryStore, LockingStore
from ._events.streams import RunStream
from ._tools.toolkit import Toolkit
from ._tools.tools import Tool, ToolContext, failure, success, suspend, tool

__version__ = "0.1.0"

logging.getLogger("toolnexus").addHandler(logging.NullHandler())

__all__ = [
    "Agent",
    "AgentDef",
    "Handle",
    "Runtime",
    "agent",
    "AgentResult",
    "Answer",
    "Budget",
    "Client",
    "Cancelled",
    "CassetteMismatch",
    "ConfigError",
    "DispatchError",
    "Divergence",
    "ConversationStore",
    "Event",
    "HandleClosed",
    "HandleView",
    "HookFunctions",
    "HooksLike",
    "InMemoryStore",
    "LockingStore",
    "InboxFull",
    "LLMError",
    "ReplayError",
    "ReplayReport",
    "Request",
    "RunResult",
    "RunStream",
    "SpawnError",
    "StateError",
    "Tool",
    "ToolCallRecord",
    "ToolContext",
    "ToolResult",
    "Toolkit",
    "ToolnexusError",
    "UnknownHandle",
    "UnknownRequest",
    "Usage",
    "WireError",
    "WorkerPool",
    "failure",
    "make_answer",
    "make_request",
    "success",
    "suspend",
    "tool",
]
