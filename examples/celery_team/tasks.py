"""The Celery side: ``celery -A tasks worker -P threads -c 8 -Q toolnexus`` (from this folder).

Each worker process builds its runtime when it starts (``team.make_runtime``), claims the
turns whose messages it gets and runs them; a parent's ``task`` call runs its child's turn
in the same thread when no other worker has started it.
"""

from team import celery_app

app = celery_app
