"""Tools: what a model can call, the toolkit that runs them, schemas and their validation, typed output."""
