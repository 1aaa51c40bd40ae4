"""Imports every job module so that their functions are registered as runnable jobs."""

from workers import embed  # noqa: F401
