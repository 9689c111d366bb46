"""The ``toolnexus`` command line."""

from .commands import main

__all__ = ["main"]
