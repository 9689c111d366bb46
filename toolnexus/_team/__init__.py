"""The team: agent definitions, the runtime's verbs, handles and their records, scheduling, waiting, delegation, budgets and lifecycle."""
