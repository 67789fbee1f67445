"""Bessemer's Python side: a BESS gRPC client and the `.bess` syntax translator."""

__version__ = "0.1.0"
