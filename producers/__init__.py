"""The library an agent imports: ``from producers import MemoryClient``."""

from producers.client import MemoryClient, Message

__all__ = ["MemoryClient", "Message"]
