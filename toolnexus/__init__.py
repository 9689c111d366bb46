"""toolnexus: synchronous, thread-based LLM agents that delegate through a ``task`` tool."""

import logging

from .agent import Agent, agent
from .agentdef import AgentDef
from .client import Client
from .data import (
    AgentResult,
    Answer,
    Budget,
    Event,
    HandleView,
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
    ConfigError,
    DispatchError,
    HandleClosed,
    InboxFull,
    LLMError,
    SpawnError,
    StateError,
    ToolnexusError,
    UnknownHandle,
    UnknownRequest,
    WireError,
)
from .handle import Handle
from .hooks import HookFunctions, HooksLike
from .pool import WorkerPool
from .runtime import Runtime
from .store import ConversationStore, InMemoryStore, LockingStore
from .streams import RunStream
from .toolkit import Toolkit
from .tools import Tool, ToolContext, failure, success, suspend, tool

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
    "ConfigError",
    "DispatchError",
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
