"""A tree as rows of a state (a SQL database): the dialects, the schema, and one module per
group of tables, each a part of the tree store (``..parts``).

- ``dialect``, ``sqlite``, ``postgres``: what a database can do and how it spells SQL;
- ``base``: the ``StateStore`` protocol and ``SqlState``, whose members declare what a
  state can do; ``schema``: the tables, their version and the migrations;
- the parts, by the tables they touch: ``records`` and ``handlerows`` (``tn_handles``),
  ``requests`` (``tn_requests``), ``journal`` (``tn_journal``), ``events`` (``tn_stream``,
  ``tn_events``), ``transcripts`` (``tn_messages``), ``owners`` (``tn_owners``) and
  ``runs`` (whole runs, across every table);
- ``tree``: ``StoredTree``, their sum, and the unit of work that commits them together.
"""
