"""The command line: ``parser`` (every flag, in one place), ``commands`` (one
function per command, chosen by name) and ``main`` (the entry point: one line
and an exit code for every failure). Importing it imports no model, numpy or
store engine: each command imports what it uses."""

from mdindex.cli.main import main

__all__ = ["main"]
