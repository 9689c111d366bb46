"""``python -m toolnexus``: the same as the ``toolnexus`` command."""

from .cli.commands import main

raise SystemExit(main())
