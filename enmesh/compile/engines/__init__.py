"""Router engines a stack may deploy and what each accepts (docs/stack.md: "Router engines")."""

from enmesh.compile.engines.features import Feature
from enmesh.compile.engines.profile import Engine, EngineProfile, engines_providing, profile_of

__all__ = ["Engine", "EngineProfile", "Feature", "engines_providing", "profile_of"]
