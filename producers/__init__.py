"""The library an agent imports: ``from producers import MemoryClient``."""

from producers.client import MemoryClient
from producers.context import ContextItem
from producers.messages import Message

__all__ = ["ContextItem", "MemoryClient", "Message"]
