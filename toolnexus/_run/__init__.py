"""One run: the model/tool loop shared by ``Client`` and agent turns, its journal, metrics, traces and spending."""
