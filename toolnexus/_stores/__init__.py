"""Where trees and transcripts are kept.

Three layers with near names; inside the package each has one name, used for nothing else:

- **conversation store** (``ConversationStore``; ``InMemoryStore`` or a host's own): the
  transcripts a ``Client`` keeps between ``ask`` calls. The public keyword is ``store=``
  (``Client``, ``Runtime``) and the view ``conversation_store``; past the constructor a
  conversation store is called ``conversations`` (``conversations.py``).
- **state** (``StateStore``; ``SQLiteState``, ``PostgresState``, the Django state): a SQL
  database that trees live in, many trees per state, each named by its ``runtime_id``. The
  public keyword is ``state=``; inside, a state is always called ``state`` (``sql/``).
- **tree store** (``TreeStore``; ``MemoryTree``, ``StoredTree``): where one tree lives,
  in this process or as rows of a state, the sum of its parts (``parts.py``). A handle's
  and the handle table's ``store`` is their tree store: the bare word means nothing else.

A **part** is one group of a tree store's tables behind a small protocol (``records``,
``requests``, ``journal``, ``events``, ``transcripts``, ``runs``, ``owners``), and a **unit
of work** (``TreeStore.change``) is one transaction of the state in which every part's
writes commit together. A **dialect** (``sql/dialect.py``) is what a state's database can
do and how it spells SQL.
"""
