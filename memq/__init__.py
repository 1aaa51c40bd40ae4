"""memq: the state and memory layer of a multi-agent platform."""

__version__ = "0.1.0"
