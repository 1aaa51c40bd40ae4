"""The library an agent imports: ``from producers import MemoryClient``."""

from producers.client import MemoryClient, Message
from producers.tasks import Task

__all__ = ["MemoryClient", "Message", "Task"]
