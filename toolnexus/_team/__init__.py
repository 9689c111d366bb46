"""The team: agent definitions, the runtime's verbs, handles and their records, scheduling,
where turns run, waiting, delegation, budgets, and a runtime's life."""
