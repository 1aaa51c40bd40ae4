"""After commit: the RQ jobs the writer owes (embedding, consolidation, scheduled runs)."""
