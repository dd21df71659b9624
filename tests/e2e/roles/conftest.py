"""Per-role molecule checks share the stack fixtures of tests/e2e."""

from tests.e2e.conftest import build_dir, deployment, endpoints, stack

__all__ = ["build_dir", "deployment", "endpoints", "stack"]
