"""Imports every job module so that their functions are registered as runnable jobs."""

import workers.consolidate  # noqa: F401
