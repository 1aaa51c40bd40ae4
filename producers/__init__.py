"""The library an agent imports: ``from producers import MemoryClient``."""

from producers.client import MemoryClient
from producers.context import ContextItem
from producers.macros import MacroSuggestion
from producers.messages import Message
from producers.prefixes import AllowedPrefix
from producers.tasks import Task
from store.fact_reads import Fact, FactChange

__all__ = [
    "AllowedPrefix",
    "ContextItem",
    "Fact",
    "FactChange",
    "MacroSuggestion",
    "MemoryClient",
    "Message",
    "Task",
]
