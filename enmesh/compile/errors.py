"""Errors that stop compilation: a valid model that the chosen stack cannot serve."""


class CompileError(Exception):
    """The model and stack do not fit together; the message says what to change."""
