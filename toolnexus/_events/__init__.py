"""Events: the log every stream of a tree reads, and the streams that watch a run."""
