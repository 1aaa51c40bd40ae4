"""What an agent imports, re-exported as ``from memq import MemoryClient``."""
