"""A2A 1.0 on the wire, for both sides: the values (``shapes``), JSON-RPC and its error codes
(``rpc``), and the calling side (``peer``: a remote agent's card and JSON-RPC over
``requests``; ``remote``: one task of a remote teammate, from its message to the state it
rests in). Nothing here knows the runtime: ``_team`` runs a remote teammate's turn with
``remote``, and ``toolnexus.a2a`` serves a team with ``shapes`` and ``rpc``."""
