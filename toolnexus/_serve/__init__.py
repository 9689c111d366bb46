"""The served layer (CONTRACT §20): the one small layer every surface the library serves
goes through — the Flask blueprint (``toolnexus.flask``), the views of ``toolnexus.django``,
the live page, and the MCP, AG-UI and A2A endpoints. Build a new surface on it, not beside
it. Each rule has one module:

- **Who asks** (``access``): ``Access.build(authorize, public, what=..., tokens=False)``
  once, where the surface is built (neither given: ``ConfigError``); then
  ``access.principal(request, authorization=header)`` before every request: the caller's
  principal (a ``str``; ``SHARED`` for a public surface or a hook that answered ``True``)
  or ``Refused(401)``. A refused request starts, reads and answers nothing.
- **What belongs to whom** (``bindings``): ``bindings_of(rt)`` is the runtime's binding
  store, in its §11 state when it has one (table ``tn_bindings``), else in memory:
  ``bind(surface, principal, handle, data, id=None)`` (a random 128-bit URL-safe id unless
  the protocol chose one), ``get(surface, principal, id)`` (``None`` for a missing id *and*
  for another principal's: answer both with ``refused.not_found``), ``update(binding,
  data)`` (compare-and-set on ``binding.version``, across processes), ``delete(binding)``,
  and ``change(store, surface, principal, id, edit)`` (read, edit, compare-and-set, again
  on a lost race). ``data`` is the surface's own JSON object. Pruned runs take their
  bindings with them.
- **Bodies** (``bodies``): ``json_body(content_type, length, read, limit=MAX_BODY)``:
  ``415`` unless ``application/json``, ``413`` past the limit (nothing more read), ``400``
  for malformed, ``NaN`` or deeper than 64 levels.
- **Streams** (``slots``): ``StreamSlots(max_streams)`` per process; ``take()`` or
  ``Refused(503)`` with ``Retry-After`` at once; ``Held(frames, slot)`` as the response
  body gives the slot back when the stream ends or the client goes. The frames themselves
  end when the run rests (``toolnexus.sse``; §16 "streams that end").
- **Refusals** (``refused``): ``Refused(status, reason, headers=...)``, a
  ``ToolnexusError``; each surface answers it in its own shape.
- **Framework glue**: ``wsgi`` (``principal(access, environ)``, ``read_body``,
  ``read_json``, ``respond``, ``refusal``) for WSGI apps; ``for_flask`` and ``for_django``
  (imported only by the surfaces that need the framework) for blueprints and views.
"""

from __future__ import annotations

from .access import PUBLIC_MEANS, SHARED, Access, Authorize
from .bindings import Binding, Bindings, bindings_of, change, new_id
from .bodies import JSON_TYPE, MAX_BODY, json_body
from .refused import Refused, not_found
from .slots import MAX_STREAMS, Held, Slot, StreamSlots

__all__ = [
    "Access",
    "Authorize",
    "Binding",
    "Bindings",
    "Held",
    "JSON_TYPE",
    "MAX_BODY",
    "MAX_STREAMS",
    "PUBLIC_MEANS",
    "Refused",
    "SHARED",
    "Slot",
    "StreamSlots",
    "bindings_of",
    "change",
    "json_body",
    "new_id",
    "not_found",
]
