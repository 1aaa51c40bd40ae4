"""Imports every job module so that their functions are registered as runnable jobs."""

from workers import consolidate, embed, tasks

__all__ = ["consolidate", "embed", "tasks"]
