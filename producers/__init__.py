"""The library an agent imports: ``from producers import MemoryClient``."""

from producers.client import MemoryClient, Message
from producers.macros import MacroSuggestion
from producers.prefixes import AllowedPrefix
from producers.tasks import Task
from store.fact_reads import Fact, FactChange

__all__ = [
    "AllowedPrefix",
    "Fact",
    "FactChange",
    "MacroSuggestion",
    "MemoryClient",
    "Message",
    "Task",
]
