"""Bessemer's Python side: the `.bess` script syntax translator (client and CLI to come)."""

__version__ = "0.1.0"
