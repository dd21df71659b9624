"""enmesh: messaging as a service from infrastructure as code."""

__version__ = "0.1.0"
