"""Reaching the model: the engine (in-process or HTTP), the wire styles, the transport and cancel scopes."""
