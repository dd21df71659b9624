"""The compiler: a validated model and a stack -> router, broker and auth artefacts."""

from enmesh.compile.artefacts import Artefacts, compile_model, compile_stack_file, write_artefacts
from enmesh.compile.errors import CompileError
from enmesh.compile.stack import Stack, find_stack_file, load_stack

__all__ = [
    "Artefacts",
    "CompileError",
    "Stack",
    "compile_model",
    "compile_stack_file",
    "find_stack_file",
    "load_stack",
    "write_artefacts",
]
